// fwrest's docs page (/fw/rest/docs): Swagger UI over the port's own OpenAPI document.
// The document is read with the browser's credentials for this origin (a Basic port's);
// "Try it out" calls the origin that served this page, whatever host name the document's
// servers entry names (the page may be opened as localhost, a proxy's name, ...).
"use strict";
(function () {
  const root = document.getElementById("swagger-ui");
  const specUrl = root.dataset.spec;

  function fail(message) {
    const p = document.createElement("p");
    p.id = "fw-docs-error";
    p.setAttribute("role", "alert");
    p.textContent = message;
    root.replaceChildren(p);
  }

  fetch(specUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then(function (answer) {
      if (!answer.ok) {
        throw new Error(
          specUrl + " answered " + answer.status +
            (answer.status === 401
              ? " (on an oAuth2 port, make rest/docs and rest/openapi.json public in FwData NativeRoutes)"
              : ""));
      }
      return answer.json();
    })
    .then(function (spec) {
      spec.servers = [{ url: window.location.origin, description: "this page's server" }];
      window.ui = SwaggerUIBundle({
        spec: spec,
        domNode: root,
        presets: [SwaggerUIBundle.presets.apis],
        layout: "BaseLayout",
        deepLinking: false,
        validatorUrl: null, // no badge fetched from another host
      });
      // the authorization code flow, where the port offers it, with PKCE (S256), which
      // fwrest's authorize route requires (SPEC 16.1)
      window.ui.initOAuth({ usePkceWithAuthorizationCodeGrant: true });
    })
    .catch(function (error) {
      fail("The OpenAPI document could not be loaded: " + error.message);
    });
})();
