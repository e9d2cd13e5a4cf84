"""The bounded MAF pipeline: propose, validate, check, learn, within budgets (DESIGN §4).

The only layer that imports ``agent_framework``. It knows a chat-client protocol; one adapter per
transport lives in ``clients/``, and the advisor catalogue in config chooses among them.
"""

import os

from agent_framework.observability import disable_instrumentation

# Agent Framework wraps every agent run, chat call and workflow step in an OpenTelemetry span,
# with its attributes and message events: on by default, and collected by nobody unless an
# exporter is set up, which the product never does. They cost a tenth of a debate's framework
# time (0.3 of 2.8 ms). Whoever collects them sets the framework's own switch,
# ENABLE_INSTRUMENTATION, and it is left as they set it.
if "ENABLE_INSTRUMENTATION" not in os.environ:
    disable_instrumentation()
