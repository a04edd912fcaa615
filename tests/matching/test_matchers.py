"""Alertmanager matcher parsing and semantics: =, !=, =~, !~, anchoring, missing labels, quoting."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediator.definitions.matchers import Matcher, parse_matcher


@pytest.mark.parametrize(
    ("text", "name", "op", "value"),
    [
        ('alertname="GPUXidError"', "alertname", "=", "GPUXidError"),
        ("alertname=GPUXidError", "alertname", "=", "GPUXidError"),
        ('xid=~"79|48"', "xid", "=~", "79|48"),
        ("xid=~79|48", "xid", "=~", "79|48"),
        ('severity!="info"', "severity", "!=", "info"),
        ('node!~"gpu-test-.*"', "node", "!~", "gpu-test-.*"),
        ('  pod = "a b"  ', "pod", "=", "a b"),
        ('msg="say \\"hi\\""', "msg", "=", 'say "hi"'),
        ('path="a\\\\b"', "path", "=", "a\\b"),
        ('text="line\\nnext"', "text", "=", "line\nnext"),
        ('xid=~"\\d+"', "xid", "=~", "\\d+"),
        ('empty=""', "empty", "=", ""),
        ("empty=", "empty", "=", ""),
        ('eq="a=b"', "eq", "=", "a=b"),
    ],
)
def test_parse(text: str, name: str, op: str, value: str) -> None:
    m = parse_matcher(text)
    assert (m.name, m.op, m.value) == (name, op, value)


@pytest.mark.parametrize(
    "text",
    ["alertname", '="x"', '1abc="x"', 'a="unterminated', 'a="x"y"', 'a=x"y', 'a=~"(unclosed"', "a~=b"],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_matcher(text)


def test_parse_rejects_non_string() -> None:
    with pytest.raises(ValueError, match="a matcher is a string"):
        parse_matcher(42)


@pytest.mark.parametrize(
    ("matcher", "labels", "expected"),
    [
        ('alertname="A"', {"alertname": "A"}, True),
        ('alertname="A"', {"alertname": "AB"}, False),
        ('alertname!="A"', {"alertname": "B"}, True),
        ('alertname!="A"', {"alertname": "A"}, False),
        ('xid=~"79|48"', {"xid": "79"}, True),
        ('xid=~"79|48"', {"xid": "48"}, True),
        ('xid=~"7"', {"xid": "79"}, False),
        ('xid=~"79"', {"xid": "179"}, False),
        ('xid=~"79|48"', {"xid": "480"}, False),
        ('xid=~"4.*"', {"xid": "48"}, True),
        ('xid!~"79|48"', {"xid": "13"}, True),
        ('xid!~"79|48"', {"xid": "79"}, False),
        ('xid!~"7"', {"xid": "79"}, True),
        # a missing label is the empty string
        ('xid=""', {}, True),
        ('xid!=""', {}, False),
        ('xid="79"', {}, False),
        ('xid!="79"', {}, True),
        ('xid=~".*"', {}, True),
        ('xid=~".+"', {}, False),
        ('xid!~".+"', {}, True),
        ('xid=~"79"', {"xid": "79\n"}, False),
    ],
)
def test_semantics(matcher: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_matcher(matcher).matches(labels) is expected


def test_str_round_trips() -> None:
    for text in ['a="x"', 'b=~"1|2"', 'c!="q\\"uote"', 'd!~"\\\\d"']:
        m = parse_matcher(text)
        assert parse_matcher(str(m)) == m


label_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True)
values = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)


@given(name=label_names, value=values)
def test_quoted_equality_round_trip(name: str, value: str) -> None:
    m = Matcher(name=name, op="=", value=value)
    parsed = parse_matcher(str(m))
    assert parsed == m
    assert parsed.matches({name: value})


@given(name=label_names, value=values, other=values)
def test_equal_and_not_equal_are_complements(name: str, value: str, other: str) -> None:
    labels = {name: other}
    eq = Matcher(name=name, op="=", value=value)
    ne = Matcher(name=name, op="!=", value=value)
    assert eq.matches(labels) != ne.matches(labels)


@given(name=label_names, value=values)
def test_escaped_regex_behaves_like_equality(name: str, value: str) -> None:
    rx = Matcher(name=name, op="=~", value=re.escape(value))
    nrx = Matcher(name=name, op="!~", value=re.escape(value))
    assert rx.matches({name: value})
    assert not nrx.matches({name: value})
    assert not rx.matches({name: value + "x"})
    assert not rx.matches({name: "x" + value})


@given(name=label_names, value=values)
def test_missing_label_is_empty_string(name: str, value: str) -> None:
    for op in ("=", "!=", "=~", "!~"):
        m = Matcher(name=name, op=op, value=re.escape(value) if "~" in op else value)
        assert m.matches({}) == m.matches({name: ""})


@given(
    op=st.sampled_from(["=", "!=", "=~", "!~"]),
    value=st.sampled_from(["79", "7", "79|48", "", ".*", "GPU.+"]),
    label=st.one_of(st.none(), st.sampled_from(["79", "48", "", "GPUXidError", "779"])),
)
def test_the_plain_predicate_answers_as_the_matcher_does(op: str, value: str, label: str | None) -> None:
    matcher = parse_matcher(f'xid{op}"{value}"')
    labels = {} if label is None else {"xid": label}
    assert matcher.predicate()(labels) == matcher.matches(labels)
