"""The memory schema as versioned migrations: spaces, memories (chunks, facts, task summaries,
skills in one table so one vector scan and one keyword index serve every source), provenance,
the durable ingest queue, tasks, skills and LLM usage.

Other layers add their own tables as `Migration`s with their own version numbers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step. `sql` may contain `{dim}` (the embedding dimension). `postgres` is the
    PostgreSQL text when it differs by more than the types `Dialect.ddl` spells (None = `sql`)."""

    version: int
    name: str
    sql: str
    postgres: str | None = None


# Point lookups recall makes on every query. A constant `session_id IN (...)` list is an
# index scan (~1 ms) instead of a scan of every row (~3 ms at 130k rows, ~9 ms as a join);
# `seq IN (...)` checks the keyword index's proposals the same way (the postings hold seqs).
# Plain indexes, not unique: `seq` is rewritten on every text change.
RECALL_INDEXES = {"memories_session": "session_id", "memories_seq": "seq"}
RECALL_INDEXES_SQL = "".join(f"CREATE INDEX IF NOT EXISTS {name} ON memories({col});\n" for name, col in RECALL_INDEXES.items())

MEMORY_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "memory core",
        """
        CREATE SEQUENCE IF NOT EXISTS memory_seq;
        CREATE TABLE spaces (
            id VARCHAR PRIMARY KEY,
            kind VARCHAR NOT NULL,              -- user | group | public | agent
            name VARCHAR,
            created_at TIMESTAMP NOT NULL
        );
        -- Everything recall can find lives here, one row per chunk, fact, task summary or skill,
        -- so one vector scan and one FTS index serve every source.
        CREATE TABLE memories (
            id VARCHAR PRIMARY KEY,
            seq BIGINT NOT NULL DEFAULT nextval('memory_seq'),  -- bumped on every text change: FTS freshness
            space_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,              -- chunk | fact | task | skill
            role VARCHAR,                       -- chunk: user | assistant | tool
            speaker VARCHAR,
            title VARCHAR NOT NULL,             -- chunk retrieval title, task title, skill name
            text VARCHAR NOT NULL,
            search_text VARCHAR NOT NULL,       -- jieba/regex tokens joined by spaces
            content_hash VARCHAR,
            embedding FLOAT[{dim}],
            category VARCHAR,
            tags VARCHAR[],
            pinned BOOLEAN NOT NULL DEFAULT false,
            status VARCHAR NOT NULL DEFAULT 'active',  -- active | retired | archived | deleted
            superseded_by VARCHAR,
            merge_history VARCHAR,              -- JSON list of merged versions
            session_id VARCHAR,
            turn_id VARCHAR,
            task_id VARCHAR,
            needs_facts BOOLEAN NOT NULL DEFAULT false,
            created_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL
        );
        CREATE TABLE fact_sources (
            fact_id VARCHAR NOT NULL,
            chunk_id VARCHAR NOT NULL,
            PRIMARY KEY (fact_id, chunk_id)
        );
        -- The durable ingest queue. The worker never deletes a row: it marks it done or raw.
        CREATE TABLE ingest_queue (
            id VARCHAR PRIMARY KEY,
            space_id VARCHAR NOT NULL,
            session_id VARCHAR,
            turn_id VARCHAR NOT NULL,
            payload VARCHAR NOT NULL,           -- JSON: messages and their metadata
            status VARCHAR NOT NULL DEFAULT 'pending',  -- pending | done | raw
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at TIMESTAMP NOT NULL,
            last_error VARCHAR,
            created_at TIMESTAMP NOT NULL,
            done_at TIMESTAMP
        );
        CREATE UNIQUE INDEX ingest_turn ON ingest_queue(space_id, turn_id);
        CREATE TABLE tasks (
            id VARCHAR PRIMARY KEY,
            space_id VARCHAR NOT NULL,
            session_id VARCHAR,
            status VARCHAR NOT NULL DEFAULT 'open',  -- open | completed | skipped
            skip_reason VARCHAR,
            title VARCHAR,
            summary VARCHAR,
            first_user_text VARCHAR,
            chunk_count INTEGER NOT NULL DEFAULT 0,
            started_at TIMESTAMP NOT NULL,
            last_at TIMESTAMP NOT NULL,
            closed_at TIMESTAMP,
            skill_checked BOOLEAN NOT NULL DEFAULT false
        );
        CREATE TABLE skills (
            id VARCHAR PRIMARY KEY,
            space_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            description VARCHAR NOT NULL,
            version INTEGER NOT NULL DEFAULT 1,
            usage_count INTEGER NOT NULL DEFAULT 0,
            created_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL
        );
        CREATE TABLE skill_versions (
            skill_id VARCHAR NOT NULL,
            version INTEGER NOT NULL,
            content VARCHAR NOT NULL,
            changelog VARCHAR,
            source_task_id VARCHAR,
            created_at TIMESTAMP NOT NULL,
            PRIMARY KEY (skill_id, version)
        );
        CREATE TABLE llm_usage (
            called_at TIMESTAMP NOT NULL,
            purpose VARCHAR NOT NULL,
            model VARCHAR,
            ok BOOLEAN NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL
        );
        """,
    ),
    # A side table, not a column: DuckDB 1.5 cannot replay an uncheckpointed ALTER TABLE on a
    # table with a nextval() default (memories.seq), so a crash after the ALTER would corrupt it.
    Migration(
        2,
        "memory versions",
        """
        CREATE TABLE memory_versions (
            id VARCHAR PRIMARY KEY,             -- a memories.id; no row = version 1
            version INTEGER NOT NULL
        );
        """,
    ),
    Migration(3, "recall lookup indexes", RECALL_INDEXES_SQL),
    # The task-boundary verdict the ingest call gave for a turn, kept until the turn is
    # assigned to a task (memory/tasks/boundary.py). Written with the turn's chunks.
    Migration(
        4,
        "turn boundaries",
        """
        CREATE TABLE turn_boundaries (
            space_id VARCHAR NOT NULL,
            turn_id VARCHAR NOT NULL,
            new BOOLEAN NOT NULL,               -- NEW (true) or SAME
            confidence DOUBLE NOT NULL,
            created_at TIMESTAMP NOT NULL,
            PRIMARY KEY (space_id, turn_id)
        );
        """,
    ),
    # PostgreSQL searches per space through an HNSW index (filtered with iterative scans, see
    # vectors.py); DuckDB's HNSW filters after its top-k, so DuckDB scans the space exactly.
    Migration(5, "vector index", "", postgres="CREATE INDEX memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops);"),
)
