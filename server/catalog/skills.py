"""Agent skills served as MCP resources: the ``io.modelcontextprotocol/skills`` extension.

:func:`load_skills` reads a skills folder once at start (directories with a ``SKILL.md`` whose
YAML frontmatter names and describes the skill, plus supporting files) and refuses anything
invalid naming the file; files are read with a bound, so an oversized one is never held whole.
Each file is a resource under ``skill://<skill-path>/<file-path>``. The methods (SEP-2640):
``skills/list`` (frontmatter as JSON, every file with its SHA-256 and size; paginated),
``skills/get`` and ``resources/directory/read``. Entries are encoded once per
:class:`SkillSet` and spliced into answers as ``orjson.Fragment``. Frontmatter is read by
:mod:`server.catalog.frontmatter`.
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from server.catalog.extensions import SKILLS_EXTENSION, Extension, Paginate
from server.catalog.frontmatter import SkillError, parse_frontmatter
from server.catalog.resources import Resource
from server.context import Context
from server.errors import InvalidParams

SKILL_FILE = "SKILL.md"
DIRECTORY_MIME = "inode/directory"
REG_NAME = re.compile(r"^(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})+$")
# The extension's limits per skill (SEP-2640), and this server's on what it holds in memory.
MAX_FILES_PER_SKILL = 512
MAX_SKILL_BYTES = 16 * 1024 * 1024
MAX_SKILLS = 1000
MAX_TOTAL_BYTES = 256 * 1024 * 1024
MAX_DEPTH = 16
_URI_SAFE = "-._~!$&'()*+,;="


@dataclass(frozen=True)
class SkillFile:
    uri: str
    path: str  # relative to the skill folder's root, with /
    content: bytes
    mime_type: str
    digest: str

    @property
    def size(self) -> int:
        return len(self.content)

    def text(self) -> str | None:
        try:
            return self.content.decode("utf-8")
        except UnicodeDecodeError:
            return None


@dataclass(frozen=True)
class Skill:
    uri: str  # of its SKILL.md
    root: str  # the directory's URI: uri without /SKILL.md
    frontmatter: dict[str, Any]
    files: tuple[SkillFile, ...]  # SKILL.md first
    # entry() as JSON, made once: what skills/list and skills/get send.
    encoded: orjson.Fragment = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "encoded", orjson.Fragment(orjson.dumps(self.entry())))

    @property
    def name(self) -> str:
        return str(self.frontmatter["name"])

    @property
    def description(self) -> str:
        return str(self.frontmatter["description"])

    def entry(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "frontmatter": self.frontmatter,
            "resources": [
                {"uri": file.uri, "digest": file.digest, "size": file.size} for file in self.files
            ],
        }


@dataclass
class SkillSet:
    """Every skill served, every file, and every directory inside a skill."""

    skills: dict[str, Skill] = field(default_factory=dict)  # by SKILL.md URI, in order
    files: dict[str, SkillFile] = field(default_factory=dict)  # by URI
    definitions: dict[str, dict[str, Any]] = field(default_factory=dict)  # file URI -> resource
    # Directory URI -> its direct children (files as resources, subdirectories as directories).
    directories: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def merge(self, other: SkillSet) -> SkillSet:
        clash = (other.files.keys() & self.files.keys()) | (
            other.directories.keys() & self.directories.keys()
        )
        if clash:
            raise SkillError(f"skills served twice: {', '.join(sorted(clash)[:5])}")
        return SkillSet(
            {**self.skills, **other.skills},
            {**self.files, **other.files},
            {**self.definitions, **other.definitions},
            {**self.directories, **other.directories},
        )

    def extension(self, *, directory_read: bool = True) -> Extension:
        methods: dict[str, Any] = {"skills/list": self.list, "skills/get": self.get}
        if directory_read:
            methods["resources/directory/read"] = self.read_directory
        return Extension(
            SKILLS_EXTENSION,
            {"directoryRead": True} if directory_read else {},
            methods,
            cacheable=frozenset({"skills/list", "skills/get"}),
        )

    async def list(
        self, params: Mapping[str, Any], context: Context, paginate: Paginate
    ) -> dict[str, Any]:
        page, next_cursor = paginate("skills", list(self.skills.values()), params.get("cursor"))
        result: dict[str, Any] = {"skills": [skill.encoded for skill in page]}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    async def get(
        self, params: Mapping[str, Any], context: Context, paginate: Paginate
    ) -> dict[str, Any]:
        uri = params.get("uri")
        skill = self.skills.get(uri) if isinstance(uri, str) else None
        if skill is None:
            raise InvalidParams(f"No skill is served at {uri}", {"uri": uri})
        return {"skill": skill.encoded}

    async def read_directory(
        self, params: Mapping[str, Any], context: Context, paginate: Paginate
    ) -> dict[str, Any]:
        uri = params.get("uri")
        children = self.directories.get(uri) if isinstance(uri, str) else None
        if children is None:
            raise InvalidParams(f"{uri} is not a directory resource", {"uri": uri})
        assert isinstance(uri, str)
        # A cursor names its directory by digest: a URI may hold the cursor's separator.
        kind = "dir" + hashlib.sha256(uri.encode()).hexdigest()[:24]
        page, next_cursor = paginate(kind, children, params.get("cursor"))
        result: dict[str, Any] = {"resources": list(page)}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result


def _uri(scheme: str, parts: Sequence[str]) -> str:
    return f"{scheme}://" + "/".join(quote(part, safe=_URI_SAFE) for part in parts)


def _mime_type(path: str) -> str:
    if path.endswith(".md"):
        return "text/markdown"
    guessed, _ = mimetypes.guess_type(path, strict=False)
    return guessed or "application/octet-stream"


def _walk(folder: Path, root: Path, depth: int = 0) -> Iterator[Path]:
    """Regular files under ``folder``, hidden ones skipped; links and deep trees refused."""
    if depth > MAX_DEPTH:
        raise SkillError(f"{folder}: more than {MAX_DEPTH} directory levels")
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_symlink():
            raise SkillError(f"{entry}: symbolic links are not served (copy the file instead)")
        if entry.is_dir():
            yield from _walk(entry, root, depth + 1)
        elif entry.is_file():
            yield entry


def _read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, read no further than one byte past ``limit``."""
    with path.open("rb") as file:
        content = file.read(limit + 1)
    if len(content) > limit:
        raise SkillError(
            f"{path}: more than {limit} bytes, what the limits still allow (a skill holds at "
            f"most {MAX_SKILL_BYTES} bytes, all skills {MAX_TOTAL_BYTES})"
        )
    return content


def load_skills(folder: str | Path, *, scheme: str = "skill") -> SkillSet:
    """Every skill under ``folder``; :class:`SkillError` for the first thing wrong."""
    root = Path(folder)
    if not root.is_dir():
        raise SkillError(f"{root}: not a directory of skills")
    paths = list(_walk(root, root))
    skill_dirs = sorted(
        {path.parent for path in paths if path.name == SKILL_FILE and path.parent != root}
    )
    if len(skill_dirs) > MAX_SKILLS:
        raise SkillError(f"{root}: more than {MAX_SKILLS} skills")
    total = 0
    loaded: dict[Path, SkillFile] = {}
    for path in paths:
        if path.parent == root:
            continue  # a README beside the skills belongs to none of them
        if not any(skill_dir in path.parents for skill_dir in skill_dirs):
            raise SkillError(f"{path}: not inside a skill (no {SKILL_FILE} above it)")
        content = _read_bounded(path, min(MAX_SKILL_BYTES, MAX_TOTAL_BYTES - total))
        total += len(content)
        loaded[path] = SkillFile(
            uri=_uri(scheme, path.relative_to(root).parts),
            path=path.relative_to(root).as_posix(),
            content=content,
            mime_type=_mime_type(path.name),
            digest="sha256:" + hashlib.sha256(content).hexdigest(),
        )
    found = SkillSet()
    for skill_dir in skill_dirs:
        skill = _skill(root, skill_dir, loaded)
        found.skills[skill.uri] = skill
    definitions = {
        file.uri: file_definition(file, found.skills.get(file.uri)) for file in loaded.values()
    }
    directories: dict[str, dict[str, dict[str, Any]]] = {}
    for skill_dir in skill_dirs:
        parts = skill_dir.relative_to(root).parts
        directories.setdefault(_uri(scheme, parts), {})
        for path, file in loaded.items():
            if skill_dir not in path.parents:
                continue
            inner = path.relative_to(skill_dir).parts
            for depth in range(len(inner)):
                children = directories.setdefault(_uri(scheme, (*parts, *inner[:depth])), {})
                if depth == len(inner) - 1:
                    children[file.uri] = definitions[file.uri]
                else:
                    child = _uri(scheme, (*parts, *inner[: depth + 1]))
                    children[child] = {
                        "uri": child,
                        "name": inner[depth],
                        "mimeType": DIRECTORY_MIME,
                    }
    found.files = {file.uri: file for file in loaded.values()}
    found.definitions = definitions
    found.directories = {
        uri: sorted(children.values(), key=lambda child: str(child["uri"]))
        for uri, children in directories.items()
    }
    return found


def _skill(root: Path, skill_dir: Path, loaded: Mapping[Path, SkillFile]) -> Skill:
    manifest = skill_dir / SKILL_FILE
    parts = skill_dir.relative_to(root).parts
    text = loaded[manifest].text()
    if text is None:
        raise SkillError(f"{manifest}: is not UTF-8 text")
    frontmatter = parse_frontmatter(text, str(manifest))
    if frontmatter["name"] != parts[-1]:
        raise SkillError(
            f"{manifest}: name {frontmatter['name']!r} must equal its directory's name "
            f"{parts[-1]!r}"
        )
    if not REG_NAME.match(quote(parts[0], safe=_URI_SAFE)):
        raise SkillError(f"{skill_dir}: {parts[0]!r} cannot be a URI authority")
    manifest_uri = loaded[manifest].uri
    # Complete: a nested skill's files are supporting files of the enclosing one too.
    members = sorted(
        (file for path, file in loaded.items() if skill_dir in path.parents),
        key=lambda file: (file.uri != manifest_uri, file.path),
    )
    if len(members) > MAX_FILES_PER_SKILL:
        raise SkillError(f"{skill_dir}: more than {MAX_FILES_PER_SKILL} files in one skill")
    if sum(file.size for file in members) > MAX_SKILL_BYTES:
        raise SkillError(f"{skill_dir}: more than {MAX_SKILL_BYTES} bytes in one skill")
    return Skill(
        manifest_uri, manifest_uri.removesuffix("/" + SKILL_FILE), frontmatter, tuple(members)
    )


def file_definition(file: SkillFile, skill: Skill | None) -> dict[str, Any]:
    """The resource a skill file is listed as (``resources/list``, directory reads); a skill's
    own SKILL.md takes the skill's name and description."""
    if skill is not None:
        return {
            "uri": file.uri,
            "name": skill.name,
            "description": skill.description,
            "mimeType": file.mime_type,
            "size": file.size,
        }
    return {
        "uri": file.uri,
        "name": file.path.rsplit("/", 1)[-1],
        "mimeType": file.mime_type,
        "size": file.size,
    }


def skill_resource(skills: SkillSet, uri: str) -> Resource:
    """The resource serving one file of ``skills``: its bytes as text when they are UTF-8 (the
    bytes the digest covers), else as a blob."""
    file = skills.files[uri]
    definition = skills.definitions[uri]
    text = file.text()
    value: str | bytes = text if text is not None else file.content
    return Resource(
        uri,
        _constant(value),
        name=definition["name"],
        description=definition.get("description"),
        mime_type=file.mime_type,
        size=file.size,
    )


def _constant(value: str | bytes) -> Callable[[], Awaitable[str | bytes]]:
    async def read() -> str | bytes:
        return value

    return read
