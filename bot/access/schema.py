"""The access tables: identities (one person on one channel, their role and user space), pairing
requests, link codes (migration 200) and the spaces an identity kept when it joined another by
/link (201). Versions 200-299 belong to access/; linking's own tables are in bot.access.linking.
"""

from __future__ import annotations

from memory.erase import Dependent, EraseRules
from memory.store.connection import Migration

ACCESS_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        200,
        "access",
        """
        CREATE TABLE identities (
            channel VARCHAR NOT NULL,
            external_id VARCHAR NOT NULL,
            space_id VARCHAR NOT NULL,          -- the person's user space (shared once linked)
            role VARCHAR NOT NULL,              -- owner | admin | user | blocked
            display_name VARCHAR NOT NULL,
            created_at TIMESTAMP NOT NULL,
            updated_at TIMESTAMP NOT NULL,
            PRIMARY KEY (channel, external_id)
        );
        CREATE TABLE pairing_requests (
            code VARCHAR PRIMARY KEY,
            channel VARCHAR NOT NULL,
            external_id VARCHAR NOT NULL,
            display_name VARCHAR NOT NULL,
            chat_id VARCHAR NOT NULL,           -- where to tell them they were let in
            status VARCHAR NOT NULL DEFAULT 'pending',  -- pending | approved | denied
            created_at TIMESTAMP NOT NULL,
            expires_at TIMESTAMP NOT NULL,
            decided_by VARCHAR,
            decided_at TIMESTAMP
        );
        CREATE TABLE link_codes (
            code VARCHAR PRIMARY KEY,
            channel VARCHAR NOT NULL,           -- the issuer, whose space the redeemer joins
            external_id VARCHAR NOT NULL,
            status VARCHAR NOT NULL DEFAULT 'open',     -- open | used | replaced
            created_at TIMESTAMP NOT NULL,
            expires_at TIMESTAMP NOT NULL,
            used_by VARCHAR,
            used_at TIMESTAMP
        );
        """,
    ),
    Migration(
        201,
        "kept spaces",
        """
        -- A space an identity had before it joined another person's space by /link: its memories
        -- stay there (they never move into the joined space) and only that identity reads them.
        CREATE TABLE kept_spaces (
            channel VARCHAR NOT NULL,
            external_id VARCHAR NOT NULL,
            space_id VARCHAR NOT NULL,
            kept_at TIMESTAMP NOT NULL,
            PRIMARY KEY (channel, external_id, space_id)
        );
        """,
    ),
)


# What an erase of a person's space reaches here besides the tables with a space_id (identities,
# kept_spaces: found by memory.erase): the requests and codes of the identities that use it.
IDENTITY_OF_SPACE = ("EXISTS (SELECT 1 FROM identities i WHERE i.space_id = $space "
                     "AND i.channel = {t}.channel AND i.external_id = {t}.external_id)")
ACCESS_ERASE = EraseRules(dependents=(
    Dependent("pairing_requests", IDENTITY_OF_SPACE.format(t="pairing_requests")),
    Dependent("link_codes", IDENTITY_OF_SPACE.format(t="link_codes")),
))
