"""The location features of SPEC 10 (and the rate limits of SPEC 13.7) as stages of a port's
request pipeline.

Each feature is compiled once per port at start from its locations' configuration and given
to the port's pipeline by the assembly (``fwrest.server.assembly``) as early, admitted or
outgoing stages; a port none of whose locations configures a feature has no stage for it, so it pays
nothing on the request path.

Owns: CORS (:mod:`.cors`), the security headers (:mod:`.headers`), the rate limits
(:mod:`.ratelimit`: counted in the state store through the worker's store client, which the
assembly hands it). Must not know: sockets, the worker, the guards (a preflight is answered
before authorization; a rate limit reads the user the guard left on the context; the other
stages see the answer the pipeline made).
"""

from fwrest.features.cors import CorsPolicy, CorsStages
from fwrest.features.headers import SecurityHeaders
from fwrest.features.ratelimit import RateLimiter

__all__ = ["CorsPolicy", "CorsStages", "RateLimiter", "SecurityHeaders"]
