"""Skills in the Agent Skills format: parsed from folders or the Store, listed, read safely."""

from ctxgraph.store.skills.catalog import SkillCatalog, unknown_tools
from ctxgraph.store.skills.files import (
    SkillFileError,
    alist_skill_files,
    aread_skill_text,
    list_skill_files,
    read_skill_text,
)
from ctxgraph.store.skills.format import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    NAME_PATTERN,
    SkillFormatError,
    parse_skill_md,
    valid_skill_name,
)
from ctxgraph.store.skills.model import (
    EMPTY_SNAPSHOT,
    STORE_NAMESPACE,
    STORE_REF_PREFIX,
    Skill,
    SkillProblem,
    SkillSnapshot,
    SkillSource,
)

__all__ = [
    "EMPTY_SNAPSHOT",
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "NAME_PATTERN",
    "STORE_NAMESPACE",
    "STORE_REF_PREFIX",
    "Skill",
    "SkillCatalog",
    "SkillFileError",
    "SkillFormatError",
    "SkillProblem",
    "SkillSnapshot",
    "SkillSource",
    "alist_skill_files",
    "aread_skill_text",
    "list_skill_files",
    "parse_skill_md",
    "read_skill_text",
    "unknown_tools",
    "valid_skill_name",
]
