"""Errors of the SGLang client and its weight sync."""


class SGLangError(RuntimeError):
    """Base class of client errors."""


class SGLangServerError(SGLangError):
    """Server unreachable / failing after the bounded retries."""


class SGLangRequestError(SGLangError):
    """The server rejected the request (4xx); not retried."""


class SGLangProtocolError(SGLangError):
    """The server answered with a body that is not a valid SGLang response."""
