"""Channels: each turns its platform's protocol into bot.Message and bot.Reply and back.

May import bot's port (bot.channel, bot.message, bot.errors) and libraries; never memory/.
"""
