"""server.settings_errors: pydantic's report and unread variables, in the variables' own names,
from what they are given (no environment read here)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field, SecretStr, ValidationError

from server.settings_errors import expected, explain, unknown_warnings


class Model(BaseModel):
    port: int = Field(8000, ge=0, le=65535)
    secret: SecretStr = SecretStr("")
    mode: str = Field("a", pattern=r"^[ab]$")


def report(**values: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        Model(**values)
    return caught.value


def test_a_bad_value_is_named_by_its_variable_with_what_it_takes() -> None:
    line = explain(report(port="abc"), Model.model_fields, prefix="X_")
    assert line == "X_PORT='abc' is not valid: use a whole number from 0 to 65535 (default 8000)"


def test_a_hidden_value_is_never_repeated_and_problems_share_one_line() -> None:
    line = explain(
        report(secret=12345, mode="zz"), Model.model_fields, prefix="X_", hidden={"secret"}
    )
    assert "12345" not in line
    assert line == (
        "X_SECRET=(hidden) is not valid: use text; "
        "X_MODE='zz' is not valid: use text matching ^[ab]$ (default a)"
    )


def test_expected_words_a_fields_kind_bounds_and_default() -> None:
    assert expected(Model.model_fields["port"]) == ("a whole number from 0 to 65535 (default 8000)")


def test_only_unknown_mcp_variables_are_warned_about_with_the_closest_name() -> None:
    assert unknown_warnings({"MCP_PORTT", "MCP_PORT", "HOME", "MCP_ZZZZZZZZ"}, ["MCP_PORT"]) == [
        "MCP_PORTT is not a setting of this server and is ignored: did you mean MCP_PORT?",
        "MCP_ZZZZZZZZ is not a setting of this server and is ignored: every setting is in "
        ".env.example",
    ]
