"""WeChat Official Account: the callback adapter, safe-mode crypto, message XML and the customer-service API client.

May import bot's port, adapters.split and adapters.plaintext.
"""
