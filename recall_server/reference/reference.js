// The API reference: Swagger UI over the server's own OpenAPI document, every file from this server.
//
// The page's Content-Security-Policy (routes/reference.py) allows scripts, styles and fetches from this
// origin only, so this start-up script is a file of its own, not inline. A key given to "Authorize" stays
// in this page's memory (persistAuthorization off: never in localStorage) and travels only in the
// Authorization header of "Try it out" requests to this server.

window.ui = SwaggerUIBundle({
  url: "/schema/openapi.json",
  dom_id: "#reference",
  deepLinking: true, // each operation has its own #/tag/operationId address
  validatorUrl: null, // by default Swagger UI asks validator.swagger.io for a badge
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout", // no top bar: its box loads documents from other addresses
  persistAuthorization: false,
  displayRequestDuration: true,
  onComplete: () => {
    document.body.dataset.ready = "1";
  },
});
