// Draws the guide's ```mermaid blocks (MkDocs writes them as <pre><code class="language-mermaid">)
// with the vendored Mermaid (js/mermaid/, SOURCE.md there), loaded only on a page that has one:
// nothing is loaded from elsewhere.
(function () {
  "use strict";
  var here = document.currentScript.src;
  document.addEventListener("DOMContentLoaded", function () {
    var blocks = document.querySelectorAll("pre > code.language-mermaid");
    if (!blocks.length) {
      return;
    }
    var nodes = [];
    blocks.forEach(function (code) {
      var drawing = document.createElement("div");
      drawing.className = "mermaid";
      drawing.textContent = code.textContent;
      code.parentNode.replaceWith(drawing);
      nodes.push(drawing);
    });
    var script = document.createElement("script");
    script.src = here.replace(/mermaid-init\.js(\?.*)?$/, "mermaid/mermaid.min.js");
    script.onload = function () {
      window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
      window.mermaid.run({ nodes: nodes });
    };
    document.head.appendChild(script);
  });
})();
