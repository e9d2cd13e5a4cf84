"""The file-inbox daemon: which inbox entries are inputs, when they are complete, and how they move.

Events are hints; the file system is the truth (DESIGN §6). The pure core — ``filters`` (what is
an input), ``stability`` (has it stopped changing), ``ledger`` (what happened to each content hash),
``claim`` (take an entry out of the inbox without racing anyone) and ``archive`` (unpack a bundle
safely) — imports no ``agent_framework`` and no ``watchdog``: the watcher only hands over hints,
and every decision here is tested on ``tmp_path`` with an injected clock.
"""
