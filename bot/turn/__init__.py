"""The turn, from an accepted message to its reply: the gateway and its conversation queues, the agent, its tools, sessions and limits, chat commands and the views they print.

May import bot's port and shared modules (config, scheduler, job_views, observe), access/, delivery/ and memory/; never operator/, api/ or cli/.
"""
