"""server.catalog.uritemplate: RFC 6570 level 1 and 2 expansion and matching."""

import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.catalog.uritemplate import TemplateError, UriTemplate


def test_variables_in_order():
    assert UriTemplate("x://{a}/{+b}/{c}").variables == ["a", "b", "c"]


def test_simple_expression_matches_one_segment():
    template = UriTemplate("file:///users/{id}/profile")
    assert template.match("file:///users/42/profile") == {"id": "42"}
    assert template.match("file:///users/4/2/profile") is None
    assert template.match("file:///users//profile") is None
    assert template.match("file:///users/42/profile/extra") is None
    assert template.match("xfile:///users/42/profile") is None


@pytest.mark.parametrize("stop", ["/", "?", "#", ","])
def test_simple_expression_stops_at_delimiters(stop):
    assert UriTemplate("x://{a}").match(f"x://a{stop}b") is None


def test_reserved_expression_matches_nested_paths():
    template = UriTemplate("file:///{+path}")
    assert template.match("file:///a/b/c.txt") == {"path": "a/b/c.txt"}
    assert template.match("file:///") is None


def test_literals_are_not_regex():
    template = UriTemplate("x://a.b/{v}")
    assert template.match("x://a.b/1") == {"v": "1"}
    assert template.match("x://aXb/1") is None


def test_match_percent_decodes():
    assert UriTemplate("x://{v}").match("x://hello%20w%C3%B6rld%3F%2C") == {"v": "hello wörld?,"}


@pytest.mark.parametrize(
    "value",
    ["..%2Fsecret", "a%2fb", "%2E%2E", "..", "%2e", ".", "a%00b", "%00"],
)
def test_simple_value_cannot_leave_its_segment(value):
    # A decoded "/" would be a second segment, a dot segment climbs out of the prefix, and
    # NUL truncates names in C-level APIs: none of them names something below "files/".
    assert UriTemplate("x://files/{name}").match(f"x://files/{value}") is None


@pytest.mark.parametrize("value", ["a..b", ".hidden", "...", "a.", "%2E%2E%2E"])
def test_dots_that_are_not_a_dot_segment_are_data(value):
    template = UriTemplate("x://files/{name}")
    assert template.match(f"x://files/{value}") == {"name": value.replace("%2E", ".")}


def test_reserved_value_keeps_escaped_reserved_characters_and_decodes_the_rest():
    template = UriTemplate("file:///{+path}")
    assert template.match("file:///a/b%20c/%C3%BC%2F%3Fd%25") == {"path": "a/b c/ü%2F%3Fd%"}


@pytest.mark.parametrize(
    "path",
    ["../etc/passwd", "a/../../b", "a/..", "./a", "a/%2E%2E/b", "%2e%2e/x", "a%00b", "a/./b"],
)
def test_reserved_value_refuses_dot_segments_and_nul(path):
    assert UriTemplate("file:///{+path}").match(f"file:///{path}") is None


@pytest.mark.parametrize("path", ["a..b/c", "..a/b", "a/b..", "a%2F..%2Fb", "a/.hidden"])
def test_reserved_value_with_dots_inside_segments_matches(path):
    assert UriTemplate("file:///{+path}").match(f"file:///{path}") == {"path": path}


def test_expand_simple_encodes_reserved_characters():
    template = UriTemplate("x://items/{name}")
    assert template.expand({"name": "a b/c?d"}) == "x://items/a%20b%2Fc%3Fd"
    assert template.expand({"name": "ok-._~"}) == "x://items/ok-._~"


def test_expand_reserved_keeps_reserved_characters():
    assert UriTemplate("file:///{+path}").expand({"path": "a/b c?d"}) == "file:///a/b%20c?d"


@pytest.mark.parametrize("value", ["plain", "a b", "ü?#,", "100%", "%2F"])
def test_expand_then_match_round_trips(value):
    template = UriTemplate("x://v/{value}")
    assert template.match(template.expand({"value": value})) == {"value": value}


@pytest.mark.parametrize("value", ["a/b c", "ü/?x", "100%", "a,b#c"])
def test_reserved_expand_then_match_round_trips(value):
    template = UriTemplate("x://v/{+value}")
    assert template.match(template.expand({"value": value})) == {"value": value}


def test_a_slash_only_round_trips_through_a_reserved_variable():
    simple, reserved = UriTemplate("x://v/{value}"), UriTemplate("x://v/{+value}")
    assert simple.match(simple.expand({"value": "a/b"})) is None
    assert reserved.match(reserved.expand({"value": "a/b"})) == {"value": "a/b"}


def test_missing_value_expands_to_empty():
    assert UriTemplate("x://{a}/{b}").expand({"a": "1"}) == "x://1/"


@pytest.mark.parametrize(
    "template",
    [
        "x://{#frag}",
        "x://{?query}",
        "x://{/path}",
        "x://{a,b}",
        "x://{a*}",
        "x://{a:3}",
        "x://{}",
        "x://{a}/{a}",
        "x://{a",
        "x://a}",
        "x://{{a}}",
        "x://{a}{b}",
        "x://{+a}{b}.json",
    ],
)
def test_unsupported_syntax_is_rejected_at_declaration(template):
    with pytest.raises(TemplateError):
        UriTemplate(template)


@pytest.mark.parametrize("template", ["x://{a.b}", "x://{1}"])
def test_a_variable_name_no_regex_group_can_take_raises_template_error(template):
    # Refused as TemplateError at declaration, never a raw re.error from building the pattern.
    with pytest.raises(TemplateError, match="unsupported expression"):
        UriTemplate(template)


def test_template_error_is_a_value_error():
    assert issubclass(TemplateError, ValueError)


# -- matching is linear in the URI ----------------------------------------------------------


def _lazy_regex(template: str) -> re.Pattern[str]:
    """The backtracking regex matching used to build: the reference for which split is right."""
    pattern, position = ["^"], 0
    for found in re.finditer(r"\{([^{}]*)\}", template):
        pattern.append(re.escape(template[position : found.start()]))
        body = found.group(1)
        name = body.lstrip("+")
        pattern.append(f"(?P<{name}>.+?)" if body.startswith("+") else f"(?P<{name}>[^/?#,]+?)")
        position = found.end()
    pattern.append(re.escape(template[position:]) + "$")
    return re.compile("".join(pattern))


LITERALS = st.sampled_from(["", ".", "/", "-", "a", "ab", "./", "aa", "/x/", ",", "a/a", "b.a"])
PIECES = st.text(alphabet="ab./-,?", min_size=1, max_size=5)


@st.composite
def templates_and_uris(draw: st.DrawFn) -> tuple[str, str]:
    count = draw(st.integers(1, 4))
    template = "x:" + draw(LITERALS)
    for index in range(count):
        reserved = draw(st.booleans())
        # Neighbouring variables need a literal between them (refused otherwise).
        last = index == count - 1
        literal = draw(LITERALS if last else LITERALS.filter(bool))
        template += "{" + ("+" if reserved else "") + f"v{index}}}" + literal
    if draw(st.booleans()):
        uri = re.sub(r"\{[^}]*\}", lambda _: draw(PIECES), template)
    else:
        uri = "x:" + draw(st.text(alphabet="ab./-,?", max_size=14))
    return template, uri


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(templates_and_uris())
def test_linear_split_is_the_shortest_left_to_right_as_the_regex_found(case: tuple[str, str]):
    template, uri = case
    parsed = UriTemplate(template)
    found = _lazy_regex(template).match(uri)
    expected = None if found is None else [found.group(name) for name in parsed.variables]
    assert parsed._split(uri) == expected


def test_splits_of_ambiguous_templates():
    assert UriTemplate("weather://{city}.{format}").match("weather://a.b.c") == {
        "city": "a",
        "format": "b.c",
    }
    assert UriTemplate("repo://{+dir}/{name}").match("repo://a/b/c.txt") == {
        "dir": "a/b",
        "name": "c.txt",
    }
    assert UriTemplate("x://{+a}/{b}/{+c}").match("x://p/q/r/s") == {
        "a": "p",
        "b": "q",
        "c": "r/s",
    }


FORTY_KB = 40_000


@pytest.mark.parametrize(
    ("template", "uri"),
    [
        # The finding: two variables in one segment, a dot-separated 40 KB value, no match.
        ("weather://{city}.{format}", "weather://" + "a." * (FORTY_KB // 2) + "/"),
        ("weather://{city}.{format}", "weather://" + "." * FORTY_KB + ","),
        ("x://{a}.{b}.{c}", "x://" + "a." * (FORTY_KB // 2) + "/"),
        ("x://{+a}/{+b}.json", "x://" + "a/" * (FORTY_KB // 2) + "json"),
        # A match is fast either way, but has as many candidate splits.
        ("weather://{city}.{format}", "weather://" + "a." * (FORTY_KB // 2) + "b"),
    ],
)
def test_a_40kb_uri_is_matched_in_linear_time(template: str, uri: str):
    # The backtracking regex took seconds here (8.6 s for the first case when it was found);
    # the two linear passes take milliseconds, so the bound is generous.
    parsed = UriTemplate(template)
    started = time.perf_counter()
    parsed.match(uri)
    assert time.perf_counter() - started < 0.5
