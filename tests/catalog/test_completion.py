import pytest

from server.catalog.completion import run_completer
from server.catalog.content import Completion

pytestmark = pytest.mark.anyio


async def test_sync_and_async_completers_give_a_completion():
    def sync_completer(value, arguments):
        return [value + "1"]

    async def async_completer(value, arguments):
        return [value + arguments["x"]]

    assert (await run_completer(sync_completer, "a", {})).values == ["a1"]
    assert (await run_completer(async_completer, "a", {"x": "2"})).values == ["a2"]


async def test_a_completion_is_passed_through():
    given = Completion(["x"], total=9, has_more=True)
    assert await run_completer(lambda value, arguments: given, "", {}) is given


@pytest.mark.parametrize("bad", ["abc", [1, 2], [None]])
async def test_anything_but_strings_is_refused(bad):
    with pytest.raises(TypeError):
        await run_completer(lambda value, arguments: bad, "", {})


async def test_a_completer_names_its_parameters_as_it_likes():
    def completer(partial, context):  # both passed by position
        return [partial + context["x"]]

    assert (await run_completer(completer, "a", {"x": "3"})).values == ["a3"]
