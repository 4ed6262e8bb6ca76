"""One module per channel; each turns its platform protocol into bot.Message and back."""
