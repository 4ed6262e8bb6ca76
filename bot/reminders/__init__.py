"""Reminders: the WHEN parser (`when`, `phrases`, `schedule`), their store, their delivery through the
outbox, the desk that sets, lists and cancels them, and their texts. May import the port, the shared
parts, access and delivery."""
