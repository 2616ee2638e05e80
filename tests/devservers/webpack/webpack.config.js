// webpack-dev-server in its default configuration (no devServer section):
// tests/tests/preview_diagnostics.rs previews it, then restarts it with a
// config that adds the setting the agent's warning names.
module.exports = {
  mode: "development",
  entry: "./src/index.js",
};
