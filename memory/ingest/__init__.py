"""The write pipeline: capture a turn into the durable queue, then the worker's chunks, facts and raw mode.

May import store/, recall/ (for candidates and ages) and memory's shared parts.
"""
