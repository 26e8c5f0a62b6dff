"""API errors: OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``, and
Anthropic's ``{"type": "error", "error": {"type", "message"}}`` for ``/v1/messages``."""

from __future__ import annotations

import json

from starlette.responses import Response

#: HTTP status -> (OpenAI error type, status label used in llmserve_requests_total)
ERROR_KINDS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "bad_request"),
    401: ("authentication_error", "unauthorized"),
    404: ("not_found_error", "not_found"),
    405: ("invalid_request_error", "bad_request"),
    408: ("invalid_request_error", "client_timeout"),
    413: ("invalid_request_error", "too_large"),
    429: ("rate_limit_error", "rejected"),
    500: ("server_error", "error"),
    503: ("service_unavailable_error", "unavailable"),
    504: ("timeout_error", "timeout"),
    # Anthropic's "overloaded": what /v1/messages answers where the others say 429
    529: ("overloaded_error", "rejected"),
}
#: HTTP status -> Anthropic's error type (``api_error`` for any other)
ANTHROPIC_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class ApiError(Exception):
    """A request answered with an HTTP error and an OpenAI error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        """The OpenAI error type for this status."""
        return ERROR_KINDS.get(self.status, ("server_error", "error"))[0]

    @property
    def label(self) -> str:
        """The ``status`` label this error is counted under."""
        return ERROR_KINDS.get(self.status, ("server_error", "error"))[1]

    def body(self) -> dict[str, dict[str, str | None]]:
        """The OpenAI error object."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def anthropic_body(self) -> dict[str, object]:
        """Anthropic's error object."""
        kind = ANTHROPIC_TYPES.get(self.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": self.message}}

    def payload(self, anthropic: bool = False) -> bytes:
        """The error object as JSON bytes (OpenAI's, or Anthropic's)."""
        return json.dumps(self.anthropic_body() if anthropic else self.body()).encode()

    def response(self, anthropic: bool = False) -> Response:
        """A JSON response carrying this error (in Anthropic's shape when asked)."""
        return Response(
            self.payload(anthropic),
            status_code=self.status,
            media_type="application/json",
            headers=self.headers,
        )
