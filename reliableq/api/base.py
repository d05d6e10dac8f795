"""The base view every ReliableQ and charges route uses: auth, parsing and problem+json errors."""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from . import problems


class ProblemJSONParser(JSONParser):
    """Accept application/json bodies only; anything else is a 415."""


class BaseAPIView(APIView):
    # Token first: an anonymous request then gets 401 with WWW-Authenticate: Token.
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [ProblemJSONParser]
    renderer_classes = [JSONRenderer]

    def get_exception_handler(self) -> Any:
        return problems.exception_handler
