"""Conformance fixtures that ask the client: elicitation forms and input-required rounds.

Each asks through the era-neutral Context API (``elicit``, ``sample``, ``list_roots``,
``ask``): a server-to-client request on the legacy wire, input-required rounds on the
2026-07-28 wire. The ``add_*`` functions declare them on the conformance catalog at the point
of its list where they belong (the list order is part of what the suite sees).
"""

from __future__ import annotations

from server import Catalog, Context, Elicitation, InputRequest, Roots, Sampling

NAME_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Your name"}},
    "required": ["name"],
}
CONFIRM_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def add_input_required_fixtures(catalog: Catalog) -> None:
    @catalog.tool
    async def test_input_required_result_elicitation(ctx: Context) -> str:
        """Asks for the user's name with an input-required result (key user_name)."""
        answer = await ctx.elicit("What is your name?", NAME_SCHEMA, key="user_name")
        return f"Hello, {(answer.content or {}).get('name', 'stranger')}!"

    @catalog.tool
    async def test_input_required_result_sampling(ctx: Context) -> str:
        """Asks the client's model a question with an input-required result."""
        reply = await ctx.sample("What is the capital of France?", 100, key="capital_question")
        content = reply.get("content")
        return f"The model said: {content.get('text') if isinstance(content, dict) else content}"

    @catalog.tool
    async def test_input_required_result_list_roots(ctx: Context) -> str:
        """Asks for the client's roots with an input-required result."""
        roots = await ctx.list_roots(key="client_roots")
        return f"Client exposed {len(roots)} root(s)."

    @catalog.tool
    async def test_input_required_result_request_state(ctx: Context) -> str:
        """Keeps state across rounds in the sealed requestState; says state-ok when it survived."""
        first_round = "issued" not in ctx.state
        ctx.state.setdefault("issued", "round-1")
        answer = await ctx.elicit("Please confirm", CONFIRM_SCHEMA, key="confirm")
        if first_round or ctx.state.get("issued") != "round-1":
            return "state-missing: the request state did not come back"
        return f"state-ok: confirmation received ({answer.action})"

    @catalog.tool
    async def test_input_required_result_multiple_inputs(ctx: Context) -> str:
        """Asks three things at once: a name, a model greeting and the roots."""
        name, greeting, roots = await ctx.ask(
            Elicitation("What is your name?", NAME_SCHEMA, key="user_name"),
            Sampling("Generate a greeting", 50, key="greeting"),
            Roots(key="client_roots"),
        )
        content = greeting.get("content", {})
        return (
            f"name={(name.content or {}).get('name')}, greeting={content.get('text')}, "
            f"roots={len(roots)}"
        )

    @catalog.tool
    async def test_input_required_result_multi_round(ctx: Context) -> str:
        """Two rounds of questions: a name, then a favourite color."""
        name = await ctx.elicit("Step 1: What is your name?", NAME_SCHEMA, key="step1")
        color = await ctx.elicit(
            "Step 2: What is your favorite color?",
            {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
            key="step2",
        )
        return f"{(name.content or {}).get('name')} likes {(color.content or {}).get('color')}."

    @catalog.tool
    async def test_input_required_result_tampered_state(ctx: Context) -> str:
        """Asks for a confirmation; a modified requestState must be refused."""
        answer = await ctx.elicit("Please confirm", CONFIRM_SCHEMA, key="confirm")
        return f"Confirmed: {answer.action}"

    @catalog.tool
    async def test_input_required_result_capabilities(ctx: Context) -> str:
        """Asks only for what the client declared: sampling, elicitation or roots."""
        wanted: list[InputRequest] = []
        if ctx.client_supports("sampling"):
            wanted.append(Sampling("Say hello", 50, key="sample"))
        if ctx.client_supports("elicitation"):
            wanted.append(Elicitation("What is your name?", NAME_SCHEMA, key="user_name"))
        if ctx.client_supports("roots"):
            wanted.append(Roots(key="client_roots"))
        if not wanted:
            return "The client declared no capability to ask through."
        answers = await ctx.ask(*wanted)
        return f"Received {len(answers)} answer(s)."


def add_elicitation_form_fixtures(catalog: Catalog) -> None:
    """The SEP-1034 (defaults) and SEP-1330 (enum forms) elicitation fixtures."""

    @catalog.tool
    async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
        """Elicitation whose fields all carry default values (SEP-1034)."""
        answer = await ctx.elicit(
            "Please review and update the form fields with defaults",
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {
                        "type": "string",
                        "description": "User status",
                        "enum": ["active", "inactive", "pending"],
                        "default": "active",
                    },
                    "verified": {"type": "boolean", "description": "Verified", "default": True},
                },
            },
        )
        return f"Elicitation completed: action={answer.action}, content={answer.content}"

    @catalog.tool
    async def test_elicitation_sep1330_enums(ctx: Context) -> str:
        """Elicitation with every enum form (SEP-1330)."""
        colors = ["red", "green", "blue"]
        titled = [{"const": c, "title": c.title()} for c in colors]
        answer = await ctx.elicit(
            "Please choose from the enum options",
            {
                "type": "object",
                "properties": {
                    "untitledSingle": {"type": "string", "enum": colors},
                    "titledSingle": {"type": "string", "oneOf": titled},
                    "legacyEnum": {
                        "type": "string",
                        "enum": colors,
                        "enumNames": ["Red", "Green", "Blue"],
                    },
                    "untitledMulti": {"type": "array", "items": {"type": "string", "enum": colors}},
                    "titledMulti": {"type": "array", "items": {"anyOf": titled}},
                },
            },
        )
        return f"Elicitation completed: action={answer.action}, content={answer.content}"
