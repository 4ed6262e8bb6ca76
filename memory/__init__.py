"""memgate's memory engine: capture -> ingest -> store, and query -> recall, over one store.

Imports only the standard library, third-party packages and itself; never bot/ or adapters/.
"""
