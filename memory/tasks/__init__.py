"""Tasks and skills: boundaries and skip rules, task summaries, skill evolution and SKILL.md files.

May import store/ and memory's shared parts; never bot/ or adapters/.
"""
