"""Authentication of one request: signature schemes of webhook senders and a plain shared token.

Pure functions of (headers, raw body, now, secrets): no I/O, no clock. Every comparison of a
secret-derived value is constant-time (``hmac.compare_digest``). A refusal carries a reason that
is safe to log: it names what was wrong, never a secret or a signature.

Schemes:
- ``standard`` (Standard Webhooks): HMAC-SHA256 of ``{webhook-id}.{webhook-timestamp}.{body}``
  with the base64 key of a ``whsec_...`` secret, ``webhook-signature: v1,<base64> ...``; the same
  three under Svix's names (``svix-id``, ``svix-timestamp``, ``svix-signature``) verify alike.
- ``github``: ``X-Hub-Signature-256: sha256=<hex>``, HMAC-SHA256 of the body. GitHub signs neither
  a timestamp nor the delivery id: a replay with the same id is ``duplicate`` only while the id is
  retained (EXT-5), and one with a new id is a new event (docs/webhooks.md, "Replays").
- ``stripe``: ``Stripe-Signature: t=<unix>,v1=<hex>[,v1=...]``, HMAC-SHA256 of ``{t}.{body}``
  with the ``whsec_...`` secret as text.
- ``token``: ``Authorization: Bearer <token>`` (or the token alone in a configured header).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

# Standard Webhooks' headers and Svix's names for the same three (the specification grew out of
# Svix; senders built on it, Clerk and Resend among them, send only ``svix-*``).
STANDARD_NAMES = ("webhook-id", "webhook-timestamp", "webhook-signature")
SVIX_NAMES = ("svix-id", "svix-timestamp", "svix-signature")
_ASCII_DIGITS = re.compile(r"[0-9]+", re.ASCII)


def standard_headers(headers: Mapping[str, str]) -> tuple[str, str, str]:
    """The names a Standard Webhooks request carries its id, timestamp and signature under: the
    specification's ``webhook-*``, or Svix's ``svix-*`` when it has no ``webhook-signature`` but a
    ``svix-signature``. One set whole, never a mix: the id read as the delivery id is the one signed."""
    svix = "webhook-signature" not in headers and "svix-signature" in headers
    return SVIX_NAMES if svix else STANDARD_NAMES


def shown(value: str) -> str:
    """A header value for a message, as its sender wrote it: the ASGI server hands header bytes over
    as ISO-8859-1, so UTF-8 text is restored (Arabic-Indic digits, not their bytes read as Latin-1);
    bytes that are not UTF-8 are shown as bytes (``b'\\xff'``)."""
    try:
        return repr(value.encode("iso8859-1").decode("utf-8")[:40])
    except UnicodeEncodeError:  # characters past U+00FF: text already
        return repr(value[:40])
    except UnicodeDecodeError:
        return repr(value.encode("iso8859-1")[:40])


@dataclasses.dataclass(frozen=True)
class AuthResult:
    ok: bool
    reason: str = ""
    code: str = ""  # one of a fixed few: what a log line per kind is keyed by (never the sender's text)


OK = AuthResult(True)


def refuse(code: str, reason: str) -> AuthResult:
    return AuthResult(False, reason, code)


def verify(
    scheme: str, headers: Mapping[str, str], body: bytes, now: datetime, secrets: Sequence[bytes], *,
    tolerance: timedelta, token_header: str | None = None,
) -> AuthResult:
    """Check one request. ``headers`` have lower-case names; ``secrets`` are tried in order (rotation)."""
    if scheme == "none":
        return OK
    if not secrets:
        return refuse("no_secret", "no secret is configured for this endpoint")
    if scheme == "token":
        return _token(headers, secrets, token_header)
    check = {"standard": _standard, "github": _github, "stripe": _stripe}[scheme]
    return check(headers, body, now, secrets, tolerance)


def _timestamp(raw: str, now: datetime, tolerance: timedelta) -> tuple[int | None, AuthResult]:
    # ASCII digits only: int() also reads other scripts' digits ('١٧٠٠'), which no sender signs.
    if not _ASCII_DIGITS.fullmatch(raw.strip()):
        return None, refuse("bad_timestamp", f"timestamp {shown(raw)} is not a Unix time in seconds (ASCII digits 0-9)")
    ts = int(raw.strip())
    skew = now.timestamp() - ts
    if abs(skew) > tolerance.total_seconds():
        direction = "old" if skew > 0 else "far in the future"
        return None, refuse("stale_timestamp", f"timestamp outside the tolerance of {tolerance.total_seconds():g}s "
                            f"({abs(skew):.0f}s {direction}): a replay or a wrong clock")
    return ts, OK


def _standard(headers: Mapping[str, str], body: bytes, now: datetime, secrets: Sequence[bytes], tolerance: timedelta) -> AuthResult:
    names = standard_headers(headers)
    msg_id, stamp, signature = (headers.get(h) for h in names)
    missing = [h for h, v in zip(names, (msg_id, stamp, signature), strict=True) if not v]
    if missing:
        return refuse("missing_header", f"missing header {', '.join(missing)} (Standard Webhooks: webhook-id, "
                      "webhook-timestamp, webhook-signature, or Svix's svix-id, svix-timestamp, svix-signature)")
    ts, problem = _timestamp(stamp, now, tolerance)  # type: ignore[arg-type]
    if ts is None:
        return problem
    signed = f"{msg_id}.{ts}.".encode() + body
    offered = [s.split(",", 1)[1] for s in signature.split() if s.startswith("v1,")]  # type: ignore[union-attr]
    if not offered:
        return refuse("bad_signature_header", f"{names[2]} holds no v1 signature")
    for secret in secrets:
        try:
            key = _standard_key(secret)
        except ValueError as exc:
            return refuse("bad_secret", str(exc))
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
        if any(hmac.compare_digest(expected, o.encode()) for o in offered):
            return OK
    return refuse("signature_mismatch", f"signature mismatch ({names[2]})")


def _standard_key(secret: bytes) -> bytes:
    text = secret.decode(errors="replace").strip()
    text = text.removeprefix("whsec_")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the configured Standard Webhooks secret is not 'whsec_' + base64") from None


def _github(headers: Mapping[str, str], body: bytes, now: datetime, secrets: Sequence[bytes], tolerance: timedelta) -> AuthResult:
    signature = headers.get("x-hub-signature-256")
    if not signature:
        return refuse("missing_header", "missing header X-Hub-Signature-256 (set a secret on the GitHub webhook)")
    if not signature.startswith("sha256="):
        return refuse("bad_signature_header", "X-Hub-Signature-256 does not start with 'sha256='")
    offered = signature[len("sha256="):].strip().lower().encode()
    for secret in secrets:
        expected = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
        if hmac.compare_digest(expected, offered):
            return OK
    return refuse("signature_mismatch", "signature mismatch (X-Hub-Signature-256)")


def _stripe(headers: Mapping[str, str], body: bytes, now: datetime, secrets: Sequence[bytes], tolerance: timedelta) -> AuthResult:
    header = headers.get("stripe-signature")
    if not header:
        return refuse("missing_header", "missing header Stripe-Signature")
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    stamps = [v for k, v in parts if k.strip() == "t"]
    offered = [v.strip().lower().encode() for k, v in parts if k.strip() == "v1"]
    if len(stamps) != 1 or not offered:
        return refuse("bad_signature_header", "Stripe-Signature needs one t= and at least one v1= element")
    ts, problem = _timestamp(stamps[0], now, tolerance)
    if ts is None:
        return problem
    signed = f"{ts}.".encode() + body
    for secret in secrets:
        expected = hmac.new(secret, signed, hashlib.sha256).hexdigest().encode()
        if any(hmac.compare_digest(expected, o) for o in offered):
            return OK
    return refuse("signature_mismatch", "signature mismatch (Stripe-Signature)")


def _token(headers: Mapping[str, str], secrets: Sequence[bytes], header: str | None) -> AuthResult:
    name = (header or "authorization").lower()
    raw = headers.get(name)
    if not raw:
        return refuse("missing_header", f"missing header {header or 'Authorization'}")
    if header is None:
        scheme, _, raw = raw.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            return refuse("bad_signature_header", "Authorization is not 'Bearer <token>'")
    # Digests first: compare_digest is constant-time only for inputs of equal length.
    offered = hashlib.sha256(raw.strip().encode()).digest()
    for secret in secrets:
        if hmac.compare_digest(hashlib.sha256(secret).digest(), offered):
            return OK
    return refuse("token_mismatch", "token mismatch")
