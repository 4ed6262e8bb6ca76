"""Storage: the DuckDB connection and its migrations, memory rows, vectors and the keyword index.

May import memory's shared parts (errors, text); nothing from ingest/, recall/ or tasks/.
"""
