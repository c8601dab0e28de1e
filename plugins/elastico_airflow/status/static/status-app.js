// ElastiCo's scheduling status inside Airflow's own page: the plugin's react_app (Browse -> "ElastiCo
// scheduling"). Airflow renders this component in its page, not in an iframe, so every link opens in the
// top window; links to Airflow's own pages go through Airflow's router (no reload). The body is the
// server-rendered fragment of /elastico/status (the same HTML the standalone page shows), refreshed every
// 10 s; the filter form and the cancel buttons are handled here. Written against the host's React
// (globalThis.React / ReactRouterDOM, which Airflow 3 exposes to plugins): no build step.
const React = globalThis.React;
const h = React.createElement;
const api = new URL("../", import.meta.url); // .../elastico/
const REFRESH_MS = 10000;

function airflowBase() {
  return new URL(document.baseURI).pathname.replace(/\/$/, "");
}

function useNavigateOrNull() {
  const router = globalThis.ReactRouterDOM;
  return router && router.useNavigate ? router.useNavigate() : null;
}

function StatusApp() {
  const ref = React.useRef(null);
  const [body, setBody] = React.useState("");
  const [query, setQuery] = React.useState("");
  const [error, setError] = React.useState("");
  const navigate = useNavigateOrNull();

  const load = React.useCallback(async () => {
    try {
      const res = await fetch(new URL("status/fragment" + query, api), {
        credentials: "same-origin",
        headers: { Accept: "text/html" },
      });
      if (!res.ok) {
        setError(`the status page answered ${res.status}`);
        return;
      }
      setBody(await res.text());
      setError("");
    } catch (err) {
      setError(String(err));
    }
  }, [query]);

  React.useEffect(() => {
    load();
    const timer = setInterval(load, REFRESH_MS);
    return () => clearInterval(timer);
  }, [load]);

  const cancel = async (id) => {
    const root = ref.current.querySelector("#eco");
    if (!window.confirm(`Cancel job ${id}? Its GPUs are released and its process is stopped.`)) return;
    const res = await fetch(new URL(`api/jobs/${encodeURIComponent(id)}/cancel`, api), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-ElastiCo-CSRF": root ? root.dataset.csrf : "" },
      body: "{}",
    });
    const answer = await res.json().catch(() => ({}));
    if (!res.ok) window.alert(`Not cancelled: ${answer.detail || res.status}`);
    load();
  };

  const onClick = (ev) => {
    const button = ev.target.closest("button[data-cancel]");
    if (button) {
      ev.preventDefault();
      cancel(button.getAttribute("data-cancel"));
      return;
    }
    const link = ev.target.closest("a[href]");
    if (!link || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
    if (link.dataset.filterClear) {
      ev.preventDefault();
      setQuery("");
      return;
    }
    const url = new URL(link.getAttribute("href"), window.location.href);
    const base = airflowBase();
    const own = url.origin === window.location.origin && url.pathname.startsWith(base + "/");
    if (own && navigate && !url.pathname.startsWith(api.pathname) && link.target !== "_blank") {
      ev.preventDefault(); // an Airflow page (task instance, log): Airflow's router, no reload
      navigate(url.pathname.slice(base.length) + url.search + url.hash);
    } // anything else (MLflow, the JSON): the browser's own navigation, in this top window
  };

  const onSubmit = (ev) => {
    const form = ev.target.closest("form[data-filters]");
    if (!form) return;
    ev.preventDefault();
    const params = new URLSearchParams();
    for (const [key, value] of new FormData(form)) if (value) params.set(key, String(value));
    const text = params.toString();
    setQuery(text ? `?${text}` : "");
  };

  return h(
    "div",
    { "data-elastico-app": "status", style: { minHeight: "100%", background: "#fff" } },
    error ? h("p", { className: "eco-error", style: { color: "#b91c1c", padding: "8px 16px" } }, error) : null,
    h("div", { ref, onClick, onSubmit, dangerouslySetInnerHTML: { __html: body } }),
  );
}

globalThis["ElastiCo scheduling"] = StatusApp;
globalThis.AirflowPlugin = StatusApp;
export default StatusApp;
