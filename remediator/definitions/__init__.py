"""Rules, playbooks and the Xid catalog: YAML in, typed and checked definitions out (pure: no I/O libraries).

The engine calls `load_definitions` once (and on reload) and reads the returned DefinitionSet; templates,
conditions and Xid facts are in their own modules (templates, conditions, xid).
"""

from __future__ import annotations

from remediator.definitions.loader import DefinitionSet, check_paths, load_definitions
from remediator.definitions.matchers import Matcher, parse_matcher
from remediator.definitions.models import Playbook, RevertSpec, Rule, Step
from remediator.definitions.variables import TEMPLATE_VARIABLES
from remediator.definitions.xid import XidCatalog, XidInfo, recovery_action_from_message

__all__ = [
    "TEMPLATE_VARIABLES",
    "DefinitionSet",
    "Matcher",
    "Playbook",
    "RevertSpec",
    "Rule",
    "Step",
    "XidCatalog",
    "XidInfo",
    "check_paths",
    "load_definitions",
    "parse_matcher",
    "recovery_action_from_message",
]
