"""Durable delivery: the inbox (a message is stored before the platform is acknowledged), the outbox (a reply is stored before it is sent, retried in order) and the cluster ownership that decides which process delivers what.

May import bot's port (message, channel, errors), observe and memory/; never access, the turn, operator, api or cli.
"""
