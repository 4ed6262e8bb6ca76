"""Storage: the backend seam (`backend.open_store`, `MemoryStore`), the DuckDB store
(connection) and the PostgreSQL one (pg), their SQL differences (dialect, placeholders), the
migrations, memory rows, vectors and the keyword index.

May import memory's shared parts (errors, text); nothing from ingest/, recall/ or tasks/.
"""
