"""Secret redaction (R§8, mode "tools") for transcripts and for text sent to remote providers.

A matched secret shorter than 18 characters becomes ``***``; a longer one keeps its first 6 and
last 4 characters around an ellipsis, so a human can still tell which key it was.
"""

from __future__ import annotations

import re

MIN_KEEP = 18

# Each pattern's group 1 (or the whole match, if there are no groups) is the secret.
_PATTERNS: list[re.Pattern[str]] = [
    # PEM private keys, whole block.  The body stops at the first "-----" (the END line, or the next
    # BEGIN): with "[\s\S]*?" every BEGIN without an END scanned to the end of the text, and a
    # transcript of pasted headers took minutes to index.
    re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[^-]*(?:-(?!----)[^-]*)*-----END [A-Z ]{0,40}PRIVATE KEY-----"),
    # A key cut off before its END line (a paste or tool output truncated mid-key): the header and
    # the body after it (a 16-character base64 run or an encrypted key's header first, so prose about
    # the header is left alone), up to the first character no PEM body or header line holds.  Whole
    # blocks were masked above, so only an endless remainder is left to match here.
    re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----\s*(?:Proc-Type:|[A-Za-z0-9+/=]{16})[A-Za-z0-9+/=\s:,-]*"),
    # ENV-style assignments: OPENAI_API_KEY=..., DB_PASSWORD: ...  Matched from the keyword (not
    # preceded by a lowercase letter) with a bounded tail: "\b[A-Z0-9_]*KEY[A-Z0-9_]*" backtracked
    # over every KEY in a long upper-case run (300 KB of them took minutes).
    re.compile(
        r"(?<![a-z])(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]{0,64}\s*[=:]\s*[\"']?([^\s\"']+)",
    ),
    # JSON / YAML fields: "apiKey": "...", "token": "...", password: "..."
    re.compile(
        r"[\"']?(?:api[_-]?key|apikey|access[_-]?token|refresh[_-]?token|token|secret|password|"
        r"client[_-]?secret)[\"']?\s*:\s*[\"']([^\"']+)[\"']",
        re.IGNORECASE,
    ),
    # CLI flags: --token x, --api-key=x, --password x
    re.compile(r"--(?:api[_-]?key|token|secret|password)[= ]\s*[\"']?([^\s\"']+)", re.IGNORECASE),
    # Authorization headers (also quoted, as JSON holds them) and bare bearer tokens.
    re.compile(r"Authorization[\"']?\s*:\s*[\"']?(?:Bearer|Basic|Token)\s+([A-Za-z0-9._~+/=-]+)", re.IGNORECASE),
    re.compile(r"(?<![A-Za-z0-9_])Bearer\s+([A-Za-z0-9._~+/=-]{18,})"),
    # Well-known key prefixes.  Where a key starts and ends is said in ASCII (not ``\b``, for
    # which a Chinese, Japanese or Korean letter is a word character): a key written straight
    # after one, as those languages are written without spaces (我的密钥是sk-…, キーはghp_…), was
    # no key at all and went unmasked into the index and to a remote embedding provider.
    re.compile(
        r"(?<![A-Za-z0-9_])((?:sk-|sk_|ghp_|gho_|ghu_|ghs_|github_pat_|xox[abposr]-|xapp-|gsk_|AIza|pplx-|npm_)"
        r"[A-Za-z0-9_\-]{6,})"
    ),
    # Telegram bot tokens: 123456789:AA...
    re.compile(r"(?<![A-Za-z0-9_])(\d{8,10}:[A-Za-z0-9_-]{35})(?![A-Za-z0-9_])"),
    # Beyond R§8, formats people paste into chats every day.  Each starts where no word character
    # precedes it and its runs are bounded, so text that almost matches costs linear time.
    # Lower- or mixed-case assignments: password=..., api_key = ..., aws_secret_access_key=...
    re.compile(
        r"(?<![A-Za-z0-9])(?:api[_-]?key|apikey|access[_-]?key|secret(?:[_-]?access)?(?:[_-]?key)?|"
        r"(?:access|auth|refresh|bearer)?[_-]?token|password|passwd|passphrase|pwd)\s*=\s*[\"']?([^\s\"'&;,]+)",
        re.IGNORECASE,
    ),
    # "password: hunter2" in prose or YAML without quotes
    re.compile(r"(?<![A-Za-z0-9])(?:password|passwd|passphrase)\s*:\s*([^\s\"']+)", re.IGNORECASE),
    # "API key: abc123...", "x-api-key: ..." headers: only a value that looks like a key (has a digit)
    re.compile(
        r"(?<![A-Za-z0-9])(?:api[_-]?key|access[_-]?token|auth[_-]?token|secret[_-]?key|client[_-]?secret)"
        r"\s*:\s*(?=[^\s\"']{0,200}\d)([A-Za-z0-9._~+/=-]{8,})",
        re.IGNORECASE,
    ),
    # user:password@ in a URL (postgres://app:pw@db/x, https://user:token@git.example.com)
    re.compile(r"(?<![A-Za-z0-9+.-])[a-z][a-z0-9+.-]{0,30}://[^\s:/@]{1,256}:([^\s/@]{1,256})@", re.IGNORECASE),
    # curl -u user:password
    re.compile(r"(?<!\S)(?:-u|--user)\s+[^\s:\"']{1,256}:([^\s\"']+)"),
    # AWS access key ids, JSON Web Tokens, GitLab and Hugging Face tokens
    re.compile(r"(?<![A-Za-z0-9_])((?:AKIA|ASIA)[0-9A-Z]{16})(?![A-Za-z0-9_])"),
    re.compile(r"(?<![A-Za-z0-9_.-])(eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"),
    re.compile(r"(?<![A-Za-z0-9_-])(glpat-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,})"),
    # Stripe restricted keys and webhook secrets, SendGrid keys, Google OAuth access tokens
    re.compile(r"(?<![A-Za-z0-9_-])((?:rk_live_|rk_test_|whsec_)[A-Za-z0-9]{16,}|SG\.[A-Za-z0-9_-]{16,}\."
               r"[A-Za-z0-9_-]{16,}|ya29\.[A-Za-z0-9_-]{20,})"),
    # a Slack incoming webhook's secret part (anyone holding the URL can post to the channel)
    re.compile(r"hooks\.slack\.com/services/[A-Za-z0-9]{1,32}/[A-Za-z0-9]{1,32}/([A-Za-z0-9]{16,})"),
    # Azure connection strings: AccountKey=...;  SharedAccessKey=...;
    re.compile(r"(?<![A-Za-z0-9])(?:AccountKey|SharedAccessKey)\s*=\s*([^\s;\"']{8,})", re.IGNORECASE),
    # DB_PASS=..., SMTP_PASS: ... (the ENV pattern above wants PASSWORD or PASSWD)
    re.compile(r"(?<![A-Za-z0-9])[A-Z][A-Z0-9]{0,30}_PASS\s*[=:]\s*[\"']?([^\s\"']+)"),
]


def mask(secret: str) -> str:
    if len(secret) < MIN_KEEP:
        return "***"
    return f"{secret[:6]}…{secret[-4:]}"


def redact_text(text: str) -> str:
    """Return ``text`` with every recognised secret masked; other text is untouched."""
    if not text:
        return text
    for pattern in _PATTERNS:
        text = pattern.sub(_replace, text)
    return text


def _replace(match: re.Match[str]) -> str:
    if match.re.groups == 0:
        return mask(match.group(0))
    whole, secret = match.group(0), match.group(1)
    if secret in ("***",) or "…" in secret:
        return whole
    start = match.start(1) - match.start(0)
    return whole[:start] + mask(secret) + whole[start + len(secret):]


def url_credentials(url: str) -> tuple[str, ...]:
    """A URL's password (or lone ``token@``) as written and decoded, the Basic token httpx sends
    for it, and a credential in its query (``?key=…``, as written and decoded): what error messages
    must never quote (a server may echo the request's headers and path)."""
    import base64
    from urllib.parse import unquote

    in_query = tuple(s for m in _QUERY_SECRET.finditer(url.partition("#")[0])
                     for s in (m.group(2), unquote(m.group(2))))
    userinfo = _userinfo(url)
    if not userinfo:
        return in_query
    user, colon, password = userinfo.partition(":")
    basic = f"{unquote(user)}:{unquote(password)}"
    if not colon:
        password = user  # the token is the user name
    token = base64.b64encode(basic.encode()).decode("ascii")
    return tuple(s for s in (password, unquote(password), token, *in_query) if s)


def proxy_credentials() -> tuple[str, ...]:
    """The credentials of the proxies the environment names (``HTTPS_PROXY=http://user:pw@…``,
    ``ALL_PROXY``, ``HTTP_PROXY``, either case), as :func:`url_credentials` gives them.

    Why: a proxy that answers with the request it got (a 400 or 407 quoting its headers) put the
    ``Proxy-Authorization`` httpx made of that password into the error, masked by its shape only,
    which keeps the first 6 and last 4 characters of a token (part of the user name and the
    password's last letters)."""
    import os

    return tuple(s for name, value in os.environ.items() if name.lower() in ("https_proxy", "http_proxy", "all_proxy")
                 for s in url_credentials(value.strip()))


#: A URL query's credential parameter (Google's ``?key=``, Azure Functions' ``?code=``, a SAS
#: ``&sig=``, ``?access_token=``): its value, up to the next parameter, is group 2.
_QUERY_SECRET = re.compile(
    r"([?&;](?:key|api[_-]?key|apikey|x-goog-api-key|subscription-key|(?:access|auth|refresh|id)?[_-]?token|"
    r"code|sig|signature|secret|client[_-]?secret|password|passwd|pwd|auth)=)([^&#\s'\"<>]+)",
    re.IGNORECASE,
)


def masked_query(text: str) -> str:
    """``text`` with the value of every credential parameter of a URL's query in it ``***``.

    Why: a base URL given with its key in the query (``…/v1beta?key=…``, as Google's examples
    write it) was quoted whole in the error refusing it, in ``config show`` and ``status``, and at
    ``-vv`` httpx logs each request's URL; :func:`redact_text` knows ``key=`` only where a key's
    own shape (``AIza…``) says so."""
    return _QUERY_SECRET.sub(lambda m: m.group(1) + "***", text) if "=" in text else text


def shown_url(url: str) -> str:
    """``url`` for messages, reprs and ``config show``: a ``user:password@`` keeps the user, the
    password is ``***`` (a lone ``token@`` is all ``***``), and so is a credential in the query
    (:func:`masked_query`).  Parsed by hand, so a URL too broken for :func:`urllib.parse.urlsplit`
    (``http://u:pw@[::1``, no scheme) is masked as well."""
    url = masked_query(url)
    userinfo = _userinfo(url)
    if userinfo is None:
        return url
    head, sep, tail = url.partition("://")
    rest = tail if sep else url
    user, colon, _ = userinfo.partition(":")
    masked = f"{user}:***" if colon else "***"
    return f"{head}{sep}" + masked + rest[len(userinfo):] if sep else masked + rest[len(userinfo):]


def _userinfo(url: str) -> str | None:
    """The ``user[:password]`` before the host of ``url``, or ``None``."""
    rest = url.partition("://")[2] or url
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" not in authority:
        return None
    return authority.rpartition("@")[0]
