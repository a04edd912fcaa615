"""The parameter types actions share: a bad duration or Kubernetes name is refused when the step's parameters
are parsed, named with what it was meant to be, and a good one is kept exactly as the playbook wrote it."""

from __future__ import annotations

import pydantic
import pytest

from remediator.actions.drain import Drain
from remediator.actions.gpu import CollectDiagnostics
from remediator.actions.node import Annotate, Label, Taint
from remediator.actions.owner import AnnotatePods
from remediator.actions.quota import ReclaimQuota
from remediator.actions.reboot import AwaitReboot
from remediator.actions.validation import ValidateGpu
from remediator.actions.wait import Wait


@pytest.mark.parametrize(
    ("action", "params", "field"),
    [
        (Wait(), {"duration": "2 hours"}, "duration"),
        (Wait(), {"poll": "soon"}, "poll"),
        (Drain(), {"timeout": "10 minutes"}, "timeout"),
        (ReclaimQuota(), {"by": 1, "usage_wait": "-5m"}, "usage_wait"),
    ],
)
def test_a_bad_duration_is_refused_at_parse(action: Wait | Drain | ReclaimQuota, params: dict, field: str) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        action.parse(params)
    assert [e["loc"] for e in caught.value.errors()] == [(field,)]
    assert "not a duration" in str(caught.value)


def test_a_duration_is_kept_as_written() -> None:
    params = Wait().parse({"duration": "1h30m", "poll": "90s"})
    assert (params.duration, params.poll) == ("1h30m", "90s")


@pytest.mark.parametrize(
    ("action", "params", "said"),
    [
        (Taint(), {"key": "GPU Unhealthy"}, "invalid taint key"),
        (Taint(), {"value": "Xid 79"}, "invalid taint value"),
        (Label(), {"key": "example.com/", "value": "v"}, "invalid label key"),
        (Label(), {"key": "k", "value": "-bad-"}, "invalid label value"),
        (Annotate(), {"key": "a/b/c", "value": "v"}, "invalid annotation key"),
        (AnnotatePods(), {"key": "has space", "value": "v"}, "invalid annotation key"),
    ],
)
def test_a_bad_kubernetes_name_is_refused_at_parse(
    action: Taint | Label | Annotate | AnnotatePods, params: dict, said: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match=said):
        action.parse(params)


def test_annotation_keys_may_carry_a_capitalised_prefix_label_keys_may_not() -> None:
    assert Annotate().parse({"key": "Example.com/note", "value": "v"}).key == "Example.com/note"
    with pytest.raises(pydantic.ValidationError, match="invalid label key"):
        Label().parse({"key": "Example.com/note", "value": "v"})


@pytest.mark.parametrize(
    ("action", "params", "said"),
    [
        (AwaitReboot(), {"poll": "500ms"}, "between 1s and 1h"),
        (AwaitReboot(), {"poll": "2h"}, "between 1s and 1h"),
        (CollectDiagnostics(), {"timeout": 0}, "more than 0 and at most 1h"),
        (ValidateGpu(), {"timeout": "5h"}, "more than 0 and at most 4h"),
    ],
)
def test_a_duration_out_of_its_bounds_is_refused_at_parse(
    action: AwaitReboot | CollectDiagnostics | ValidateGpu, params: dict, said: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match=said):
        action.parse(params)


def test_a_duration_at_its_bounds_is_taken() -> None:
    assert AwaitReboot().parse({"poll": "1s"}).poll == "1s"
    assert AwaitReboot().parse({"poll": 3600}).poll == 3600
    assert ValidateGpu().parse({"timeout": "4h"}).timeout == "4h"
