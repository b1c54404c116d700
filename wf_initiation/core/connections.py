"""Connections: the deployment's credential bindings (TRIG-6), with their secrets kept out of history.

A connection is written in the deployment file::

    connections:
      orders-db: {connector: sql, dsn: "env:ORDERS_DSN"}
      blog: {connector: rss, headers: {Authorization: "file:/run/secrets/blog-auth"}, timeout: 10}

Any string value of the form ``env:NAME`` or ``file:/absolute/path`` is a **secret reference**.
The activation (so workflow history, ``wfi state``, the Web UI) carries the reference, never the
value: the worker resolves it each time it uses the connection, from its own environment or file
system, and only in a connection of the deployment it was started with (:class:`WorkerConnections`:
a spec is written by whoever can start a workflow, so what it holds is never a reason to resolve). A key that holds a secret (a password, token, API key, an ``Authorization`` header, a DSN
or URL with a password in it) must be a reference: an inline secret is refused when the deployment
is loaded, with the reference to write instead.

The connection as written (references included) is the *connection identity* of every binding that
uses it (INIT-3): changing a reference or a non-secret setting is a new activation (INIT-4). A
rotated secret *value* behind an unchanged reference is not: the next use resolves the new value.

Pure: nothing here reads the environment or a file by itself; :func:`resolve_settings` is given
both. Every error text a connector produces goes through :class:`Redactor` before it can reach
history, state output, the UI or a log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from wf_initiation.errors import ConnectionRefused, SecretUnavailable

REDACTED = "***"
_REF = re.compile(r"^(env|file):(.*)\Z", re.DOTALL)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# Key names that hold a secret. Keys ending in `_env`/`_file` name where a secret lives (a variable
# or a path read by your own bridge), not the secret itself, and are plain settings.
_SECRET_WORD = re.compile(
    r"(?:^|[_\-.])(password|passwd|pwd|passphrase|secret|token|api[_\-]?key|apikey|access[_\-]?key|"
    r"private[_\-]?key|signing[_\-]?key|auth|authorization|cookie|credentials?|signature)(?:$|[_\-.])",
    re.IGNORECASE,
)
_LOCATION_KEY = re.compile(r"[_\-](env|file)$", re.IGNORECASE)
# A password inside a URL's userinfo (scheme://user:password@host) or a libpq key=value string.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)(?P<pw>[^@\s/]*)(?=@)")
_CONNINFO_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|[^\s']+)", re.IGNORECASE)
_SECRET_QUERY = re.compile(  # token-like query parameters of a URL (a feed's ?token=...)
    r"(?P<head>[?&;](?:access_token|api[_-]?key|apikey|auth|key|password|passwd|pwd|secret|sig|signature|token)=)"
    r"[^&;\s#]+", re.IGNORECASE)
MIN_REDACTED_CHARS = 3
"""A resolved secret shorter than this is not searched for in text (it would blank out ordinary words)."""
MAX_SECRET_FILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class SecretRef:
    """A reference to a secret: ``env:NAME`` (the worker's environment) or ``file:/path`` (its disk)."""

    scheme: Literal["env", "file"]
    target: str

    @property
    def text(self) -> str:
        """The reference as written (``env:NAME``, ``file:/path``)."""
        return f"{self.scheme}:{self.target}"

    def problem(self) -> str | None:
        """Why this reference cannot be resolved anywhere (None when well formed)."""
        if self.scheme == "env" and not _ENV_NAME.match(self.target):
            return f"{self.text!r} is not a valid reference: write env:NAME with NAME a variable name"
        if self.scheme == "file" and not self.target.startswith("/"):
            return (f"{self.text!r} is not a valid reference: file: needs an absolute path on the worker, "
                    "e.g. file:/run/secrets/name")
        return None


def parse_ref(value: Any) -> SecretRef | None:
    """The secret reference ``value`` is, or None for a plain value."""
    if not isinstance(value, str):
        return None
    found = _REF.match(value)
    if found is None:
        return None
    return SecretRef(scheme=found.group(1), target=found.group(2))  # type: ignore[arg-type]


def check_reference(ref: str) -> str:
    """``ref`` itself when it is a well-formed secret reference (as a pydantic validator returns it).

    Raises:
        ValueError: an inline value or a malformed reference; the message names the fix.
    """
    parsed = parse_ref(ref)
    if parsed is None:
        raise ValueError(
            "a secret is given by reference, never inline: write env:NAME (an environment variable of the "
            "ingress process) or file:/absolute/path (a file holding the secret)"
        )
    problem = parsed.problem()
    if problem is not None:
        raise ValueError(problem)
    return ref


def is_secret_key(key: str) -> bool:
    """Does a setting (or HTTP header) of this name hold a secret?"""
    return bool(_SECRET_WORD.search(key)) and not _LOCATION_KEY.search(key)


def embedded_password(value: str) -> str | None:
    """The password inside a URL (``scheme://user:pw@host``) or a libpq string (``password=pw``)."""
    url = _URL_PASSWORD.search(value)
    if url is not None and url.group("pw"):
        return url.group("pw")
    conninfo = _CONNINFO_PASSWORD.search(value)
    if conninfo is not None:
        return conninfo.group("pw").strip("'")
    return None


def inline_secret_problems(settings: Mapping[str, Any], path: str = "") -> list[str]:
    """Settings that hold a secret inline instead of a reference, as fix-naming messages."""
    problems: list[str] = []
    for key, value in settings.items():
        where = f"{path}{key}"
        if isinstance(value, Mapping):
            problems.extend(inline_secret_problems(value, f"{where}."))
        elif isinstance(value, list):
            problems.extend(_list_problems(value, where))
        elif parse_ref(value) is None:
            problems.extend(_value_problems(str(key), where, value))
    return problems


def _list_problems(values: list[Any], where: str) -> list[str]:
    problems = []
    for i, item in enumerate(values):
        if isinstance(item, Mapping):
            problems.extend(inline_secret_problems(item, f"{where}[{i}]."))
        elif isinstance(item, str) and parse_ref(item) is None and embedded_password(item):
            problems.append(_inline_message(f"{where}[{i}]", "holds a password inside it"))
    return problems


def _value_problems(key: str, where: str, value: Any) -> list[str]:
    if value is None or isinstance(value, bool):
        return []
    if is_secret_key(key):
        return [_inline_message(where, "holds a secret inline")]
    if isinstance(value, str) and embedded_password(value):
        return [_inline_message(where, "holds a password inside it")]
    return []


def _inline_message(where: str, what: str) -> str:
    variable = re.sub(r"[^A-Za-z0-9]+", "_", where).strip("_").upper() or "SECRET"
    return (f"{where!r} {what}; secrets never go into workflow history: put the value in the worker's "
            f"environment and write \"env:{variable}\" (or \"file:/run/secrets/...\")")


def reference_problems(settings: Mapping[str, Any], path: str = "") -> list[str]:
    """Malformed references (``env:`` without a variable name, ``file:`` with a relative path)."""
    problems: list[str] = []
    for key, value in settings.items():
        where = f"{path}{key}"
        values = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else None
        if values is not None:
            problems.extend(reference_problems({str(k): v for k, v in values}, f"{where}."))
            continue
        ref = parse_ref(value)
        problem = ref.problem() if ref is not None else None
        if problem is not None:
            problems.append(f"{where!r}: {problem}")
    return problems


def reference_paths(settings: Mapping[str, Any], path: str = "") -> list[tuple[str, SecretRef]]:
    """Every secret reference in ``settings`` (at any depth), with where it is (``headers.Authorization``)."""
    found: list[tuple[str, SecretRef]] = []
    for key, value in settings.items():
        where = f"{path}{key}"
        values = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else None
        if values is not None:
            found.extend(reference_paths({str(k): v for k, v in values}, f"{where}."))
        elif (ref := parse_ref(value)) is not None:
            found.append((where, ref))
    return found


def origin_of(url: str) -> str | None:
    """``scheme://host:port`` of an http(s) URL (default ports made explicit), or None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port}"


def _origins_problems(connector: str, settings: Mapping[str, Any]) -> list[str]:
    """An rss connection whose headers hold a reference names the origins they may be sent to."""
    origins = settings.get("origins")
    problems = []
    if origins is not None:
        if not isinstance(origins, list) or not origins or not all(isinstance(o, str) for o in origins):
            return ["'origins' is a list of feed origins, e.g. origins: [\"https://blog.acme.com\"]"]
        problems = [f"'origins' entry {o!r} is not an http(s) origin; write scheme://host[:port], e.g. "
                    "\"https://blog.acme.com\"" for o in origins if origin_of(o) is None or urlsplit(o).path not in ("", "/")]
    headers = settings.get("headers")
    prefix = connector.split(".")[0]
    if prefix == "rss" and origins is None and isinstance(headers, Mapping) and reference_paths(headers):
        problems.append("'headers' hold a secret reference, so name the origins they may be sent to: add "
                        "origins: [\"https://your-feed-host\"] (each feed's scheme://host[:port]); a feed "
                        "elsewhere is then refused instead of receiving your credentials")
    if prefix == "http_json" and origins is None and (refs := reference_paths(settings)):
        problems.append(f"{refs[0][0]!r} holds a secret reference, so name the origins it may be sent to: add "
                        "origins: [\"https://api.example.com\"] (each API's scheme://host[:port]); a trigger URL "
                        "elsewhere is then refused instead of receiving your credentials")
    return problems


def _via_problems(settings: Mapping[str, Any]) -> list[str]:
    via = settings.get("via")
    if via is None or (isinstance(via, str) and re.match(r"^[a-z][a-z0-9_]*\Z", via)):
        return []
    return [f"'via' names the implementation of the connector's triggers this connection chooses, a lower-case "
            f"name such as imap; got {via!r}"]


class Connection(BaseModel):
    """A credential binding (TRIG-6): the connector it serves and its settings, secrets as references."""

    model_config = ConfigDict(extra="allow", frozen=True)
    connector: str = Field(description="Connector prefix it serves, e.g. 'mail' or 'sql', or a full name.")

    @model_validator(mode="after")
    def _no_inline_secrets(self) -> Connection:
        problems = inline_secret_problems(self.settings()) + reference_problems(self.settings())
        problems += _origins_problems(self.connector, self.settings()) + _via_problems(self.settings())
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def settings(self) -> dict[str, Any]:
        """The settings as written, references unresolved (what the activation carries)."""
        return dict(self.model_extra or {})

    def serves(self, connector: str) -> bool:
        """Does this connection serve ``connector`` (``sql.row_inserted``) or its prefix (``sql``)?"""
        return self.connector in (connector.split(".")[0], connector)

    @property
    def via(self) -> str | None:
        """The implementation of its connector's triggers it chooses (``imap``), or None for the manifest's own."""
        via = self.settings().get("via")
        return via if isinstance(via, str) else None


WORKER_FIX = ("start the worker with the deployment that defines the connection (`wfi worker --deployment FILE`, "
              "or WfiPlugin(deployment=...))")


class WorkerConnections:
    """The connections of the deployment a worker was started with: the only ones whose secret
    references it resolves.

    A poll's connection travels in the activation's spec, which anyone who can start or update a
    workflow on the worker's task queue can write. So the worker never resolves a reference because a
    spec holds it: a connection holding any reference is used only when it equals, setting for
    setting, one of its own deployment's connections for that connector, and then the worker uses its
    own copy. A worker started without a deployment resolves no reference at all. A connection of
    plain settings (no reference) holds nothing of the worker's and is used as sent.
    """

    def __init__(self, connections: Mapping[str, Connection] | None) -> None:
        self._connections = None if connections is None else dict(connections)

    @classmethod
    def none(cls) -> WorkerConnections:
        """A worker started without a deployment."""
        return cls(None)

    def bind(self, connector: str, sent: Mapping[str, Any]) -> dict[str, Any]:
        """The settings to use for a poll of ``connector`` that was sent ``sent``.

        Raises:
            ConnectionRefused: ``sent`` is not one of the deployment's connections (or holds a
                reference and the worker has no deployment); the message names the fix, never a value.
        """
        settings = {k: v for k, v in sent.items() if k != "connector"}
        refs = reference_paths(settings)
        if not refs:
            return settings  # nothing of the worker's to resolve: plain settings are used as sent
        if self._connections is None:
            where, ref = refs[0]
            raise ConnectionRefused(
                f"this worker was started without a deployment, so it resolves no secret reference (the "
                f"connection sent for {connector} has {ref.text} at {where!r}): {WORKER_FIX}")
        candidates = {n: c for n, c in self._connections.items() if c.serves(connector)}
        for connection in candidates.values():
            if _same(connection, sent, settings):
                return connection.settings()
        raise ConnectionRefused(self._mismatch(connector, settings, candidates))

    def _mismatch(self, connector: str, settings: dict[str, Any], candidates: Mapping[str, Connection]) -> str:
        if not candidates:
            found = f"this worker's deployment has no connection for {connector}"
        else:
            found = "; ".join(f"it differs from {name!r} at {', '.join(_differences(c.settings(), settings))}"
                              for name, c in sorted(candidates.items()))
        return (f"the connection sent for {connector} is not one of this worker's deployment's connections ({found}); "
                "the worker resolves secrets only from its own deployment: activate the Workfile with the "
                f"deployment this worker runs, or {WORKER_FIX}")


def _same(connection: Connection, sent: Mapping[str, Any], settings: dict[str, Any]) -> bool:
    if "connector" in sent and sent["connector"] != connection.connector:
        return False
    return _canonical(connection.settings()) == _canonical(settings)


def _canonical(value: Any) -> str:
    # JSON text tells apart what == does not (True and 1, 1 and 1.0, "1" and 1).
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def _differences(mine: Mapping[str, Any], sent: Mapping[str, Any], path: str = "") -> list[str]:
    """Where two settings trees differ (key paths, at most five), never their values."""
    out: list[str] = []
    for key in sorted(set(mine) | set(sent), key=str):
        a, b, where = mine.get(key, _MISSING), sent.get(key, _MISSING), f"{path}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out.extend(_differences(a, b, f"{where}."))
        elif _canonical(a) != _canonical(b):
            out.append(repr(where))
    return out[:5] or ["'connector'"]


_MISSING = object()


@dataclass(frozen=True)
class ResolvedConnection:
    """Settings with every reference replaced by its value, and those values (to redact)."""

    settings: dict[str, Any]
    secrets: frozenset[str]

    def redactor(self) -> Redactor:
        """A redactor of these secrets (and of passwords embedded in URLs and DSNs)."""
        return Redactor(self.secrets)


def resolve_settings(
    settings: Mapping[str, Any], env: Mapping[str, str], read_file: Callable[[str], str],
) -> ResolvedConnection:
    """Resolve every reference in ``settings``; also collect secrets embedded in URLs/DSNs.

    Args:
        settings: The connection's settings as the activation carries them.
        env: The worker's environment.
        read_file: Reads a secret file (the caller bounds its size).

    Raises:
        SecretUnavailable: a reference whose variable is unset or whose file cannot be read.
    """
    secrets: set[str] = set()
    resolved = _resolve_tree(settings, env, read_file, secrets, "")
    return ResolvedConnection(settings=resolved, secrets=frozenset(s for s in secrets if s))


def _resolve_tree(
    node: Any, env: Mapping[str, str], read_file: Callable[[str], str], secrets: set[str], where: str,
) -> Any:
    if isinstance(node, Mapping):
        return {k: _resolve_tree(v, env, read_file, secrets, f"{where}{k}.") for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_tree(v, env, read_file, secrets, f"{where}{i}.") for i, v in enumerate(node)]
    ref = parse_ref(node)
    if ref is None:
        if isinstance(node, str) and (found := embedded_password(node)):
            secrets.add(found)  # an inline DSN password (a spec recorded before secrets had to be references)
        return node
    value = _resolve_ref(ref, env, read_file, where.rstrip("."))
    secrets.add(value)
    if (found := embedded_password(value)) is not None:
        secrets.add(found)
    return value


def _resolve_ref(ref: SecretRef, env: Mapping[str, str], read_file: Callable[[str], str], where: str) -> str:
    problem = ref.problem()
    if problem is not None:
        raise SecretUnavailable(f"connection setting {where!r}: {problem}")
    if ref.scheme == "env":
        if ref.target not in env:
            raise SecretUnavailable(
                f"connection setting {where!r} references {ref.text}, which is not set in the worker's "
                "environment; set it where the worker runs and restart the worker"
            )
        return env[ref.target]
    try:
        return _strip_newline(read_file(ref.target))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SecretUnavailable(
            f"connection setting {where!r} references {ref.text}, which cannot be read on this worker "
            f"({type(exc).__name__}); create the file (readable by the worker) or fix the reference"
        ) from None


def _strip_newline(text: str) -> str:
    # Secret files written with `echo` end in a newline that is not part of the secret.
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


class Redactor:
    """Removes secrets from text: the given values, any password inside a URL or DSN, and token-like
    query parameters (``?token=``, ``&api_key=``, ``&sig=``)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so that a secret containing another is removed whole.
        self._secrets = sorted({s for s in secrets if len(s) >= MIN_REDACTED_CHARS}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        text = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED if m.group("pw") else m.group(0), text)
        if "=" in text:
            text = _SECRET_QUERY.sub(lambda m: m.group("head") + REDACTED, text)
        return _CONNINFO_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without ``secrets`` and without passwords embedded in URLs or DSNs."""
    return Redactor(secrets).redact(text)


def describe_url(url: str) -> str:
    """A URL fit for a message: without its userinfo (``user:password@``)."""
    try:
        parts = urlsplit(url)
        if "@" not in parts.netloc:
            return url
        return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    except ValueError:
        return redact(url)
