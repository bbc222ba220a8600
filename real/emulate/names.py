"""Names of what an emulation creates: its tag, its namespaces, and the rule for which ones it owns.

Every namespace is `ssim-<tag>-<node>`, `<node>` being a host of the cluster (h0, ps1, ...) or
`fabric`. Tags hold no `-`, so a name splits back into (tag, node) one way only and two emulations
with different tags can never claim the same namespace.
"""

from __future__ import annotations

import re

from sim.errors import ConfigError

PREFIX = "ssim"
DEFAULT_SUBNET = "10.213.0.0/16"  # the hosts' addresses unless `emulate up --subnet` says otherwise
FABRIC = "fabric"
TAG_MAX = 20
IFNAMSIZ = 15  # usable characters of a Linux interface name (16 with the terminating NUL)

_TAG = re.compile(rf"^[a-z0-9][a-z0-9_]{{0,{TAG_MAX - 1}}}$")
_NODE = re.compile(r"^[a-z0-9]+$")


def check_tag(tag: str) -> str:
    """`tag`, if it is valid; ConfigError otherwise."""
    if not _TAG.match(tag):
        raise ConfigError(
            f"emulate.tag: {tag!r} is not a valid tag; allowed: 1 to {TAG_MAX} characters of a-z, 0-9 and _, "
            "starting with a letter or digit"
        )
    return tag


def tag_from_name(name: str) -> str:
    """A tag derived from a config's `name`: lower case, runs of other characters as `_`, shortened."""
    tag = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:TAG_MAX].rstrip("_")
    return check_tag(tag or "syncsim")


def namespace_prefix(tag: str) -> str:
    """The start every namespace of emulation `tag` has."""
    return f"{PREFIX}-{check_tag(tag)}-"


def namespace_name(tag: str, node: str) -> str:
    """The namespace of cluster host (or `fabric`) `node` in emulation `tag`."""
    if not _NODE.match(node):
        raise ConfigError(f"cluster: host name {node!r} cannot name a namespace; allowed: a-z and 0-9")
    return namespace_prefix(tag) + node


def owned(tag: str, namespace: str) -> bool:
    """Whether `namespace` has the shape of a namespace that emulation `tag` creates."""
    prefix = namespace_prefix(tag)
    return namespace.startswith(prefix) and bool(_NODE.match(namespace[len(prefix) :]))


def check_interface(name: str, where: str) -> str:
    """`name`, if Linux accepts it as an interface name; ConfigError naming `where` otherwise."""
    if not 1 <= len(name) <= IFNAMSIZ or "/" in name or any(c.isspace() for c in name):
        raise ConfigError(f"{where}: interface name {name!r} is longer than {IFNAMSIZ} characters or not valid")
    return name
