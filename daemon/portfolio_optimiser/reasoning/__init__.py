"""Provider-independent reasoning records: assessments, plans, consultations, conclusions.

Four separations, one module each (after the public reference design, majordomus ADR 0098):

* *Reasoning is not a provider* (``policy``): the policy names capabilities, never an advisor,
  vendor or model; ``tests/test_provider_independence.py`` reads these sources to hold that.
* *Advisors are declared once* (``catalogue``): in the config, ``[[advisors]]``.
* *Absence is data* (``availability``): not configured, disabled or failing advisors are states
  derived from the records and the clock; zero advisors is an ordinary plan that decides locally.
* *Records, not transcripts* (``records``, ``store``): one writer, one JSON file per record, never
  overwritten, redacted before it is written; raw model answers are not kept.

This layer never talks to a model: the pipeline does the transport (``transport`` is its contract)
and records what happened through the store. It imports no model framework.
"""
