// Kubeconfig formats and how to use each: pure, so the rules can be checked
// on their own.

export const KUBECONFIG = "/api/v1/workspaces/credentials/kubeconfig";

// The formats this gateway offers, read from its own OpenAPI document:
// `token` always; `exec` (no token inside: kubectl asks the tenant-gateway
// command for one) where the gateway documents a `format` parameter.
export function formats(api) {
  const format = (api.paths?.[KUBECONFIG]?.get?.parameters ?? []).find((p) => p.name === "format");
  return format ? (format.schema?.enum ?? ["token", "exec"]) : ["token"];
}

// [what to know, the commands to run] for a downloaded kubeconfig.yaml.
export function howToUse(format, origin) {
  if (format === "exec") {
    return ["The kubeconfig holds no token: kubectl asks the tenant-gateway command for one. Sign it in once, then:",
      `tenant-gateway login --gateway ${origin}\nexport KUBECONFIG="$PWD/kubeconfig.yaml"\nkubectl get pods`];
  }
  return ["The kubeconfig holds a token valid for 2 hours. Then:", 'export KUBECONFIG="$PWD/kubeconfig.yaml"\nkubectl get pods'];
}
