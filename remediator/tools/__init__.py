"""Offline tools: they read definitions or stored history and plan without touching a cluster.

`simulate` (one payload), `remediator test` (playbook tests), `replay` (stored alerts through edited
definitions) share `plan_only.py`, which calls the same engine functions the live worker does
(`engine/planning.py`, `domain/guardrails.py`), so a backtest cannot disagree with production. The live
path never imports this package.
"""
