"""One adapter module per transport. Each exports ``chat_client_for(advisor, ...)`` (a MAF chat
client with the middleware and tool layers) and ``transport_for(advisor)`` (the reasoning layer's
transport contract). Vendor SDKs are imported only inside the adapter that needs them."""
