import { useState } from 'preact/hooks';
import { ApiError, encPath, get, tenantPath } from '../api';
import { ago, errorText, usePoll } from '../util';
import { href } from '../app';
import { ErrorBox, Loading, PageHead } from './common';

// KV secrets: folders and keys with their metadata. A value is read only when the user asks
// (its own GET, in the audit log), and is dropped again with "Hide".
export function Secrets({ tenant, path }: { tenant: string; path: string }) {
  const folder = path.endsWith('/') || path === '' ? path : path.slice(0, path.lastIndexOf('/') + 1);
  const key = path && !path.endsWith('/') ? path : '';
  const list = usePoll(() => get<{ data: { keys: string[] } }>(tenantPath(tenant, `secrets/kv/metadata/${encPath(folder)}?list=true`))
    .then((d) => d.data.keys ?? [], (e) => {
      if (e instanceof ApiError && e.status === 404 && e.message.includes('nothing under')) return [];
      throw e;
    }), 0, [tenant, folder]);
  const crumbs = folder.split('/').filter(Boolean);
  return (
    <div>
      <PageHead title={`Secrets · ${tenant}`} />
      <div class="crumbs">
        <a href={href(tenant, 'secrets')}>kv</a>
        {crumbs.map((c, i) => <> / <a href={href(tenant, 'secrets', crumbs.slice(0, i + 1).join('/') + '/')}>{c}</a></>)}
      </div>
      <div class="grid2">
        <div class="card">
          <h2>{folder || '/'}</h2>
          <ErrorBox error={list.error} status={list.status} />
          {!list.data && !list.error && <Loading />}
          {list.data && list.data.length === 0 && <div class="empty">No secrets here.</div>}
          <ul class="keys" id="secret-keys">
            {(list.data ?? []).map((k) => (
              <li class={folder + k === key ? 'active' : ''}>
                <a href={href(tenant, 'secrets', folder + k)}><span class={k.endsWith('/') ? 'icon folder' : 'icon key'} />{k}</a>
              </li>
            ))}
          </ul>
        </div>
        {key && <SecretMeta tenant={tenant} path={key} />}
      </div>
    </div>
  );
}

function SecretMeta({ tenant, path }: { tenant: string; path: string }) {
  const meta = usePoll(() => get<{ data: any }>(tenantPath(tenant, `secrets/kv/metadata/${encPath(path)}`)).then((d) => d.data), 0, [tenant, path]);
  const [value, setValue] = useState<Record<string, unknown> | null>(null);
  const [error, setError] = useState('');
  const open = async () => {
    setError('');
    try {
      setValue((await get<{ data: { data: Record<string, unknown> } }>(tenantPath(tenant, `secrets/kv/data/${encPath(path)}`))).data.data);
    } catch (e) {
      setError(errorText(e));
    }
  };
  const m = meta.data;
  return (
    <div class="card" key={path}>
      <h2 class="mono">{path}</h2>
      <ErrorBox error={meta.error} status={meta.status} />
      {m && (
        <>
          <dl class="kv">
            <dt>Current version</dt><dd>{m.current_version}</dd>
            <dt>Created</dt><dd>{m.created_time} <span class="muted">({ago(m.created_time)})</span></dd>
            <dt>Updated</dt><dd>{m.updated_time} <span class="muted">({ago(m.updated_time)})</span></dd>
            <dt>Max versions</dt><dd>{m.max_versions || 'server default'}</dd>
            <dt>Check-and-set</dt><dd>{m.cas_required ? 'required' : 'not required'}</dd>
          </dl>
          <h3>Versions</h3>
          <table class="table compact">
            <thead><tr><th>Version</th><th>Created</th><th>Deleted</th><th>Destroyed</th></tr></thead>
            <tbody>
              {Object.entries(m.versions ?? {}).reverse().map(([v, x]: [string, any]) => (
                <tr><td>{v}</td><td class="mono">{x.created_time}</td><td class="mono">{x.deletion_time || '—'}</td><td>{x.destroyed ? 'yes' : 'no'}</td></tr>
              ))}
            </tbody>
          </table>
          <div class="secret-value">
            {value === null ? (
              <button class="btn" id="open-secret" onClick={open}>Open the value (recorded in the audit log)</button>
            ) : (
              <>
                <pre class="mono value" id="secret-value">{JSON.stringify(value, null, 2)}</pre>
                <button class="btn ghost" onClick={() => setValue(null)}>Hide</button>
              </>
            )}
            {error && <div class="error">{error}</div>}
          </div>
        </>
      )}
    </div>
  );
}
