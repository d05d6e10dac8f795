"""The base view every ReliableQ and charges route uses: auth, parsing and problem+json errors."""

from __future__ import annotations

from typing import Any, ClassVar

from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from . import problems
from .authentication import TokenAuthentication
from .permissions import requires

__all__ = ["BaseAPIView", "ProblemJSONParser", "requires"]


class ProblemJSONParser(JSONParser):
    """Accept application/json bodies only; anything else is a 415."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            # json raises RecursionError, not ValueError, for [[[[...]]]] nested past the
            # interpreter's limit: without this, a 500.
            raise ParseError("JSON parse error - the document is nested too deeply.") from None


class BaseAPIView(APIView):
    # Token first: an anonymous request then gets 401 with WWW-Authenticate: Token.
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [ProblemJSONParser]
    renderer_classes = [JSONRenderer]
    # The query parameters the route reads; any other is a 400, after authentication and
    # permissions (a stranger learns nothing from it). None: the view checks its own.
    query_parameters: frozenset[str] | None = frozenset()
    # The reliableq permission each method needs, besides a login ("*": every method), declared:
    # {"GET": "view_job", "POST": "submit_job"}, or {"*": "view_job"}. Empty: a login only.
    needs: ClassVar[dict[str, str]] = {}

    def get_permissions(self) -> list[Any]:
        checks = list(super().get_permissions())
        codename = self.needs.get(self.request.method or "", self.needs.get("*"))
        if codename:
            checks.append(requires(f"reliableq.{codename}")())
        return checks

    def known_query_parameters(self) -> frozenset[str] | None:
        return self.query_parameters

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        known = self.known_query_parameters()
        if known is not None:
            unknown = sorted(set(request.query_params) - known)
            if unknown:
                raise ValidationError({name: ["Unknown query parameter."] for name in unknown})

    def get_exception_handler(self) -> Any:
        return problems.exception_handler

    def perform_content_negotiation(self, request: Any, force: bool = False) -> Any:
        # The API speaks JSON only: what a client asking for JSON, or anything, gets needs no
        # negotiation (it was a tenth of a submission's cost); other Accept headers are negotiated
        # as DRF does, so they still get their 406.
        if request.META.get("HTTP_ACCEPT", "*/*") in ("*/*", "application/json", ""):
            renderer = JSONRenderer()
            return renderer, renderer.media_type
        return super().perform_content_negotiation(request, force)
