"""Authorization: one guard per port (Basic with ``OnAuth``, or an oAuth2 bearer check with
its token service).

Owns validating ``FwData.Authorization`` at start, the guards that run before routing, and
password checks. Never logs a secret: the credentials of the request being checked are
registered with :data:`fwrest.log.request_secrets` so that every log record scrubs them.
"""

from fwrest.auth.basic import BasicGuard
from fwrest.auth.settings import AuthSettings, parse_authorization

__all__ = ["AuthSettings", "BasicGuard", "parse_authorization"]
