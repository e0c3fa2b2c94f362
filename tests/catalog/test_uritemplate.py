"""server.catalog.uritemplate: RFC 6570 level 1 and 2 expansion and matching."""

import contextlib

import pytest

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
    assert UriTemplate("x://{v}").match("x://hello%20world%2Fslash") == {"v": "hello world/slash"}


def test_expand_simple_encodes_reserved_characters():
    template = UriTemplate("x://items/{name}")
    assert template.expand({"name": "a b/c?d"}) == "x://items/a%20b%2Fc%3Fd"
    assert template.expand({"name": "ok-._~"}) == "x://items/ok-._~"


def test_expand_reserved_keeps_reserved_characters():
    assert UriTemplate("file:///{+path}").expand({"path": "a/b c?d"}) == "file:///a/b%20c?d"


@pytest.mark.parametrize("value", ["plain", "a b", "a/b", "ü?#,", "100%"])
def test_expand_then_match_round_trips(value):
    template = UriTemplate("x://v/{value}")
    assert template.match(template.expand({"value": value})) == {"value": value}


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
    ],
)
def test_unsupported_syntax_is_rejected_at_declaration(template):
    with pytest.raises(TemplateError):
        UriTemplate(template)


@pytest.mark.parametrize("template", ["x://{a.b}", "x://{1}"])
def test_every_bad_template_raises_template_error(template):
    # Either serve the name or refuse it as TemplateError; never a raw re.error.
    with contextlib.suppress(TemplateError):
        UriTemplate(template)


def test_template_error_is_a_value_error():
    assert issubclass(TemplateError, ValueError)
