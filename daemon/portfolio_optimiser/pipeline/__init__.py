"""The bounded MAF pipeline: propose, validate, check, learn, within budgets (DESIGN §4).

The only layer that imports ``agent_framework``. It knows a chat-client protocol; one adapter per
transport lives in ``clients/``, and the advisor catalogue in config chooses among them.
"""
