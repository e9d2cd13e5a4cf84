"""One adapter module per transport. Each exports ``chat_client_for(advisor, *, middleware)`` (a
MAF chat client with the middleware and tool layers); optionally ``cap_options(cap, field)`` (how
the output cap reaches its server) and ``sdk_errors()`` (its SDK's exceptions, typed). Vendor SDKs
are imported only inside the adapter that needs them."""
