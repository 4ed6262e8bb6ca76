"""The read pipeline: hybrid search, pure ranking functions and rendering the injected block.

May import store/ and memory's shared parts; nothing from ingest/ or tasks/.
"""
