"""server.catalog.skills and frontmatter: a skills folder read once, served as resources and as
the skills extension's entries, and refused with a message naming the file when invalid."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from server.catalog import Catalog
from server.catalog.extensions import SKILLS_EXTENSION
from server.catalog.frontmatter import SkillError, parse_frontmatter
from server.catalog.skills import DIRECTORY_MIME, load_skills
from server.errors import InvalidParams
from server.pagination import Pager
from server.sealing import Sealer
from tests.support.core_helpers import make_context

pytestmark = pytest.mark.anyio

PDF = (
    "---\nname: pdf-processing\ndescription: Extract, fill, and assemble PDF documents\n"
    "---\n\n# PDF\n"
)


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def sha(content: str | bytes) -> str:
    data = content.encode() if isinstance(content, str) else content
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write(
        tmp_path,
        {
            "README.md": "not a skill",
            "pdf-processing/SKILL.md": PDF,
            "pdf-processing/references/FORMS.md": "# Forms\n",
            "pdf-processing/logo.png": b"\x89PNG\r\n\x1a\n\xff\xfe",
            "acme/billing/refunds/SKILL.md": (
                "---\nname: refunds\ndescription: Refunds per policy\nlicense: MIT\n"
                "metadata:\n  version: '2.1'\n  approved: yes\n  since: 2024-01-01\n---\nBody\n"
            ),
            "acme/billing/refunds/examples/email.md": "Dear customer",
        },
    )


def paginate_with(page_size: int) -> Any:
    return Pager(Sealer(b"k" * 32), page_size).page


async def call(method: Any, params: dict[str, Any], page_size: int = 100) -> dict[str, Any]:
    """The method's answer as a client reads it (entries are spliced in as encoded JSON)."""
    answer = await method(params, make_context(), paginate_with(page_size))
    return orjson.loads(orjson.dumps(answer))


def test_entries_carry_frontmatter_and_a_complete_manifest(folder: Path) -> None:
    skills = load_skills(folder)
    assert list(skills.skills) == [
        "skill://acme/billing/refunds/SKILL.md",
        "skill://pdf-processing/SKILL.md",
    ]
    pdf = skills.skills["skill://pdf-processing/SKILL.md"].entry()
    assert pdf["frontmatter"] == {
        "name": "pdf-processing",
        "description": "Extract, fill, and assemble PDF documents",
    }
    assert pdf["resources"] == [
        {"uri": "skill://pdf-processing/SKILL.md", "digest": sha(PDF), "size": len(PDF)},
        {
            "uri": "skill://pdf-processing/logo.png",
            "digest": sha(b"\x89PNG\r\n\x1a\n\xff\xfe"),
            "size": 10,
        },
        {
            "uri": "skill://pdf-processing/references/FORMS.md",
            "digest": sha("# Forms\n"),
            "size": 8,
        },
    ]
    # A README beside the skills is nobody's file.
    assert not any("README" in uri for uri in skills.files)


def test_frontmatter_is_read_as_json_compatible_yaml(folder: Path) -> None:
    refunds = load_skills(folder).skills["skill://acme/billing/refunds/SKILL.md"]
    # YAML 1.2 as clients read it: "yes" and a date stay strings (PyYAML's 1.1 would not).
    assert refunds.frontmatter["metadata"] == {
        "version": "2.1",
        "approved": "yes",
        "since": "2024-01-01",
    }
    assert refunds.frontmatter["license"] == "MIT"


def test_directories_list_direct_children(folder: Path) -> None:
    skills = load_skills(folder)
    root = skills.directories["skill://pdf-processing"]
    assert [(child["uri"], child.get("mimeType")) for child in root] == [
        ("skill://pdf-processing/SKILL.md", "text/markdown"),
        ("skill://pdf-processing/logo.png", "image/png"),
        ("skill://pdf-processing/references", DIRECTORY_MIME),
    ]
    assert [child["name"] for child in skills.directories["skill://pdf-processing/references"]] == [
        "FORMS.md"
    ]
    # The prefix above a skill is not a directory this server serves.
    assert "skill://acme/billing" not in skills.directories


def test_nested_skill_files_belong_to_both(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "outer/SKILL.md": "---\nname: outer\ndescription: Outer\n---\n",
            "outer/inner/SKILL.md": "---\nname: inner\ndescription: Inner\n---\n",
            "outer/inner/notes.md": "n",
        },
    )
    skills = load_skills(tmp_path)
    outer = [r["uri"] for r in skills.skills["skill://outer/SKILL.md"].entry()["resources"]]
    inner = [r["uri"] for r in skills.skills["skill://outer/inner/SKILL.md"].entry()["resources"]]
    assert outer == [
        "skill://outer/SKILL.md",
        "skill://outer/inner/SKILL.md",
        "skill://outer/inner/notes.md",
    ]
    assert inner == ["skill://outer/inner/SKILL.md", "skill://outer/inner/notes.md"]


async def test_methods_list_get_and_read_directories(folder: Path) -> None:
    skills = load_skills(folder)
    first = await call(skills.list, {}, page_size=1)
    assert [entry["uri"] for entry in first["skills"]] == ["skill://acme/billing/refunds/SKILL.md"]
    second = await call(skills.list, {"cursor": first["nextCursor"]}, page_size=1)
    assert [entry["uri"] for entry in second["skills"]] == ["skill://pdf-processing/SKILL.md"]
    assert "nextCursor" not in second

    got = await call(skills.get, {"uri": "skill://pdf-processing/SKILL.md"})
    assert got == {"skill": skills.skills["skill://pdf-processing/SKILL.md"].entry()}
    for wrong in ("skill://nope/SKILL.md", "skill://pdf-processing", None):
        with pytest.raises(InvalidParams):
            await call(skills.get, {"uri": wrong})

    listed = await call(skills.read_directory, {"uri": "skill://pdf-processing"}, page_size=2)
    assert len(listed["resources"]) == 2
    rest = await call(
        skills.read_directory,
        {"uri": "skill://pdf-processing", "cursor": listed["nextCursor"]},
        page_size=2,
    )
    assert [child["uri"] for child in rest["resources"]] == ["skill://pdf-processing/references"]
    for not_a_directory in ("skill://pdf-processing/SKILL.md", "skill://elsewhere"):
        with pytest.raises(InvalidParams):
            await call(skills.read_directory, {"uri": not_a_directory})


async def test_catalog_serves_files_as_resources_and_declares_the_extension(folder: Path) -> None:
    catalog = Catalog()
    catalog.add_skills(folder)
    assert catalog.snapshot.capabilities["extensions"] == {
        SKILLS_EXTENSION: {"directoryRead": True}
    }
    assert "resources" in catalog.snapshot.capabilities
    assert set(catalog.snapshot.extension_methods) == {
        "skills/list",
        "skills/get",
        "resources/directory/read",
    }
    manifest = next(
        r for r in catalog.snapshot.resources if r["uri"].endswith("pdf-processing/SKILL.md")
    )
    assert manifest == {
        "uri": "skill://pdf-processing/SKILL.md",
        "name": "pdf-processing",
        "description": "Extract, fill, and assemble PDF documents",
        "mimeType": "text/markdown",
        "size": len(PDF),
    }
    text = await catalog.resources["skill://pdf-processing/SKILL.md"].read(make_context())
    assert text == [
        {"uri": "skill://pdf-processing/SKILL.md", "mimeType": "text/markdown", "text": PDF}
    ]
    blob = await catalog.resources["skill://pdf-processing/logo.png"].read(make_context())
    assert "blob" in blob[0]
    assert "text" not in blob[0]


def test_without_directory_reads_the_setting_and_method_are_absent(folder: Path) -> None:
    catalog = Catalog()
    catalog.add_skills(folder, directory_read=False)
    assert catalog.snapshot.capabilities["extensions"][SKILLS_EXTENSION] == {}
    assert "resources/directory/read" not in catalog.snapshot.extension_methods


def test_the_same_skills_twice_are_refused(folder: Path) -> None:
    catalog = Catalog()
    catalog.add_skills(folder)
    with pytest.raises(SkillError, match="served twice"):
        catalog.add_skills(folder)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a/SKILL.md": "# no frontmatter"}, "must begin with YAML frontmatter"),
        ({"a/SKILL.md": "---\nname: a\n---\n"}, "description must be a non-empty string"),
        ({"a/SKILL.md": "---\nname: b\ndescription: d\n---\n"}, "must equal its directory"),
        ({"Bad/SKILL.md": "---\nname: Bad\ndescription: d\n---\n"}, "name must be 1-64"),
        ({"a--b/SKILL.md": "---\nname: a--b\ndescription: d\n---\n"}, "name must be 1-64"),
        ({"a/SKILL.md": "---\nname: a\ndescription: [unclosed\n---\n"}, "not valid YAML"),
        ({"a/SKILL.md": "---\n- a\n- b\n---\n"}, "must be a mapping"),
        (
            {
                "a/SKILL.md": "---\nname: a\ndescription: d\nmetadata:\n"
                "  io.modelcontextprotocol/x: 1\n---\n"
            },
            "reserved",
        ),
        ({"a/SKILL.md": "---\nname: a\ndescription: d\nweight: .inf\n---\n"}, "JSON cannot"),
        ({"a/SKILL.md": b"---\nname: a\ndescription: \xff\n---\n"}, "not UTF-8"),
        (
            {"a/SKILL.md": PDF.replace("pdf-processing", "a"), "b/notes.md": "x"},
            "not inside a skill",
        ),
    ],
)
def test_invalid_skills_are_refused_naming_the_file(
    tmp_path: Path, files: dict[str, str | bytes], message: str
) -> None:
    write(tmp_path, files)
    with pytest.raises(SkillError, match=message) as refused:
        load_skills(tmp_path)
    assert str(tmp_path) in str(refused.value)


def test_limits_per_skill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import server.catalog.skills as skills_module

    write(
        tmp_path,
        {"a/SKILL.md": "---\nname: a\ndescription: d\n---\n", "a/1.md": "1", "a/2.md": "2"},
    )
    monkeypatch.setattr(skills_module, "MAX_FILES_PER_SKILL", 2)
    with pytest.raises(SkillError, match="more than 2 files"):
        load_skills(tmp_path)
    monkeypatch.setattr(skills_module, "MAX_FILES_PER_SKILL", 512)
    monkeypatch.setattr(skills_module, "MAX_SKILL_BYTES", 10)
    with pytest.raises(SkillError, match="more than 10 bytes"):
        load_skills(tmp_path)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links here")
def test_symbolic_links_are_refused(tmp_path: Path) -> None:
    write(tmp_path, {"a/SKILL.md": "---\nname: a\ndescription: d\n---\n", "secret.txt": "s"})
    (tmp_path / "a" / "link.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(SkillError, match="symbolic links"):
        load_skills(tmp_path)


def test_parse_frontmatter_accepts_a_bom_and_crlf() -> None:
    text = "\ufeff---\r\nname: x\r\ndescription: y\r\n---\r\nbody"
    assert parse_frontmatter(text, "x/SKILL.md") == {"name": "x", "description": "y"}


def test_pyyaml_is_loaded_only_when_a_frontmatter_is_read() -> None:
    # 0.9 MiB resident that a server with no skills never pays.
    script = (
        "import sys\n"
        "import server.app\n"
        "from server import Catalog\n"
        "catalog = Catalog('no-skills', '1')\n"
        "assert 'yaml' not in sys.modules, 'loaded without a skill'\n"
        "from server.catalog.frontmatter import parse_frontmatter\n"
        "text = '---\\nname: a-skill\\ndescription: Does a thing.\\n---\\nbody\\n'\n"
        "assert parse_frontmatter(text, 'SKILL.md')['name'] == 'a-skill'\n"
        "assert 'yaml' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def alias_bomb(levels: int = 8, fanout: int = 8) -> str:
    """A SKILL.md whose ~500-byte frontmatter nests YAML aliases: written out as JSON, its
    metadata is 159 MB (each level repeats the one before ``fanout`` times)."""
    lines = [
        "---",
        "name: lol",
        "description: " + "An alias bomb, " * 9 + "in one file.",
        "metadata:",
    ]
    lines.append("  a: &a [" + ",".join(['"lolol"'] * fanout) + "]")
    for previous, name in zip("abcdefghijklmnop", "bcdefghijklmnop"[: levels - 1], strict=False):
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{previous}"] * fanout) + "]")
    return "\n".join([*lines, "---", "Body", ""])


def test_an_alias_bomb_is_refused_at_load_naming_the_file(tmp_path: Path) -> None:
    bomb = alias_bomb()
    assert 480 <= len(bomb.encode()) <= 530
    write(tmp_path, {"lol/SKILL.md": bomb})
    with pytest.raises(SkillError, match="anchor or alias") as refused:
        load_skills(tmp_path)
    assert str(tmp_path / "lol" / "SKILL.md") in str(refused.value)
    assert "line 5, column 6" in str(refused.value)  # the first anchor, &a


@pytest.mark.parametrize(
    "yaml_text",
    [
        "metadata:\n  a: &x 1\n",  # an anchor alone
        "metadata:\n  a: 1\n  b: *x\n",  # an alias alone (no anchor: a YAML error anyway)
        "metadata:\n  base: &b {k: 1}\n  more:\n    <<: *b\n",  # a merge key
    ],
)
def test_anchors_aliases_and_merge_keys_are_refused(yaml_text: str) -> None:
    text = f"---\nname: a\ndescription: d\n{yaml_text}---\n"
    with pytest.raises(SkillError, match=r"a/SKILL.md: .*(anchor or alias|not valid YAML)"):
        parse_frontmatter(text, "a/SKILL.md")


def test_ampersands_and_stars_inside_values_are_text() -> None:
    text = '---\nname: a\ndescription: "&b *c"\nmetadata:\n  k: x & y * z\n---\n'
    assert parse_frontmatter(text, "a/SKILL.md")["metadata"] == {"k": "x & y * z"}


async def test_entries_are_encoded_once_not_per_request(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from server.catalog.skills import Skill

    skills = load_skills(folder)
    built: list[str] = []
    entry = Skill.entry

    def counted_entry(self: Skill) -> dict[str, Any]:
        built.append(self.uri)
        return entry(self)

    monkeypatch.setattr(Skill, "entry", counted_entry)
    answers = [await skills.list({}, make_context(), paginate_with(100)) for _ in range(3)] + [
        await skills.get(
            {"uri": "skill://pdf-processing/SKILL.md"}, make_context(), paginate_with(100)
        )
    ]
    assert built == []
    first = answers[0]["skills"]
    assert all(a is b for a, b in zip(first, answers[1]["skills"], strict=True))
    assert (
        orjson.loads(orjson.dumps(answers[3]))["skill"]["frontmatter"]["name"] == "pdf-processing"
    )


def test_a_300_mb_file_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    import tracemalloc

    write(tmp_path, {"big/SKILL.md": "---\nname: big\ndescription: d\n---\n"})
    with (tmp_path / "big" / "huge.bin").open("wb") as huge:
        huge.truncate(300 * 1024 * 1024)  # sparse: no disk space taken
    tracemalloc.start()
    try:
        with pytest.raises(SkillError, match="more than") as refused:
            load_skills(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "huge.bin" in str(refused.value)
    assert peak < 40 * 1024 * 1024  # the per-skill limit (16 MiB) and one byte, not 300 MB
