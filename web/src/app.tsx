import { useEffect, useState } from 'preact/hooks';
import { ApiError, get, isOperator, login, logout, Session, session, setLogoutHandler, storedToken } from './api';
import { duration, errorText, useTick } from './util';
import { Login } from './pages/login';
import { WorkloadList, WorkloadDetail } from './pages/workloads';
import { Submit } from './pages/submit';
import { Queues } from './pages/queues';
import { Secrets } from './pages/secrets';
import { Grants } from './pages/grants';
import { Audit } from './pages/audit';
import { Fleet } from './pages/fleet';
import { AllWorkloads } from './pages/workloads';
import { Tenants } from './pages/tenants';
import { Evictions } from './pages/evictions';

// Routes are in the URL's fragment (#/...), so the server serves one page and a reload keeps
// the view: #/tenant/<t>/<page>[/<name>] for a tenant's pages, #/fleet, #/tenants, #/evictions
// for an operator's.
interface Route {
  tenant: string;
  page: string;
  name: string;
}

function parseRoute(hash: string, s: Session): Route {
  const parts = hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  if (parts[0] === 'tenant' && parts.length >= 3) {
    return { tenant: parts[1], page: parts[2], name: parts.slice(3).join('/') };
  }
  if (parts[0] && ['fleet', 'tenants', 'evictions', 'all-workloads'].includes(parts[0])) {
    return { tenant: '', page: parts[0], name: '' };
  }
  return s.tenant ? { tenant: s.tenant, page: 'workloads', name: '' } : { tenant: '', page: 'fleet', name: '' };
}

export const href = (tenant: string, page: string, name = '') =>
  tenant ? `#/tenant/${encodeURIComponent(tenant)}/${page}${name ? '/' + name.split('/').map(encodeURIComponent).join('/') : ''}`
         : `#/${page}`;

export function App() {
  const [s, setS] = useState<Session | null>(session());
  const [reason, setReason] = useState('');
  const [restoring, setRestoring] = useState(storedToken() !== null && session() === null);
  const [hash, setHash] = useState(location.hash);

  useEffect(() => {
    setLogoutHandler((why) => {
      setS(null);
      setReason(why);
    });
    const onHash = () => setHash(location.hash);
    window.addEventListener('hashchange', onHash);
    const t = storedToken();
    if (t && !session()) {
      login(t).then(setS, (e) => {
        sessionStorage.clear();
        setReason(e instanceof ApiError && e.status === 403
          ? 'The server refused your token: it expired or was revoked. Log in again.'
          : errorText(e));
      }).finally(() => setRestoring(false));
    }
    return () => window.removeEventListener('hashchange', onHash);
  }, []);

  if (restoring) {
    return <div class="splash">Tessera</div>;
  }
  if (!s) {
    return <Login reason={reason} onLogin={(n) => { setReason(''); setS(n); }} />;
  }
  const r = parseRoute(hash, s);
  return (
    <div class="shell">
      <Sidebar s={s} r={r} />
      <div class="main">
        <Header s={s} />
        <main class="content" id="content">
          <Page s={s} r={r} />
        </main>
      </div>
    </div>
  );
}

function Header({ s }: { s: Session }) {
  useTick(1000);
  const left = s.expireTime ? (Date.parse(s.expireTime) - Date.now()) / 1000 : -1;
  return (
    <header class="topbar">
      <div class="who">
        <span class="scope-badge">{s.tenant ? `tenant ${s.tenant}` : 'operator'}</span>
        {s.chroot && <span class="chip">listener chrooted to {s.chroot}</span>}
        <span class="muted">token <b>{s.displayName || '(unnamed)'}</b> · {s.policies.join(', ')}</span>
        <span class="muted" id="token-ttl">{left < 0 ? 'never expires' : `expires in ${duration(left)}`}</span>
      </div>
      <button class="btn ghost" id="logout" onClick={() => logout('You logged out.')}>Log out</button>
    </header>
  );
}

function Sidebar({ s, r }: { s: Session; r: Route }) {
  const [tenants, setTenants] = useState<string[]>([]);
  useEffect(() => {
    if (isOperator()) {
      get<{ data: { keys: string[] } }>('/v1/tenants?list=true').then((d) => setTenants(d.data.keys ?? []), () => {});
    }
  }, [s.token]);
  const tenant = s.tenant || r.tenant || tenants[0] || '';
  const link = (page: string, label: string, t = tenant) => (
    <a class={r.page === page && (r.tenant === t || !t) ? 'nav active' : 'nav'} href={href(t, page)} id={`nav-${page}`}>
      {label}
    </a>
  );
  return (
    <nav class="sidebar">
      <div class="brand"><img src="favicon.svg" alt="" width="22" height="22" /> Tessera</div>
      {isOperator() && (
        <div class="navgroup">
          <div class="navtitle">Operator</div>
          {link('fleet', 'GPU map', '')}
          {link('all-workloads', 'All workloads', '')}
          {link('tenants', 'Tenants & fair share', '')}
          {link('evictions', 'Evictions', '')}
        </div>
      )}
      {tenant && (
        <div class="navgroup">
          <div class="navtitle">
            {isOperator() ? (
              <select id="tenant-select" value={tenant}
                      onChange={(e) => { location.hash = href((e.target as HTMLSelectElement).value, r.page && r.tenant ? r.page : 'workloads'); }}>
                {tenants.map((t) => <option value={t}>{t}</option>)}
              </select>
            ) : `Tenant ${tenant}`}
          </div>
          {link('workloads', 'Workloads')}
          {link('submit', 'Submit a workload')}
          {link('nodes', 'GPU map')}
          {link('queues', 'Queues')}
          {link('secrets', 'Secrets')}
          {link('grants', 'Grants')}
          {link('audit', 'Audit log')}
        </div>
      )}
    </nav>
  );
}

function Page({ s, r }: { s: Session; r: Route }) {
  const t = r.tenant;
  switch (r.page) {
    case 'fleet': return <Fleet tenant="" />;
    case 'tenants': return <Tenants />;
    case 'evictions': return <Evictions />;
    case 'all-workloads': return <AllWorkloads />;
    case 'workloads': return r.name ? <WorkloadDetail tenant={t} name={r.name} /> : <WorkloadList tenant={t} />;
    case 'submit': return <Submit tenant={t} />;
    case 'nodes': return <Fleet tenant={t} />;
    case 'queues': return <Queues tenant={t} />;
    case 'secrets': return <Secrets tenant={t} path={r.name} />;
    case 'grants': return <Grants tenant={t} />;
    case 'audit': return <Audit tenant={t} />;
  }
  return <div class="error">No such page: {r.page} (signed in as {s.tenant || 'operator'}).</div>;
}
