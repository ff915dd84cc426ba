import { useEffect, useRef, useState } from 'preact/hooks';
import { get, tenantPath } from '../api';
import { errorText, whenVisible } from '../util';
import { ErrorBox, PageHead } from './common';

interface Record { seq: number; time: string; type: string; request_id: string; error?: string;
                   request?: { method?: string; path?: string; remote_address?: string };
                   response?: { status?: number };
                   auth?: { display_name?: string; accessor?: string } }

// Who acted: the token's display name, else the start of its accessor (HMAC'd), else "-".
function actor(r: Record): string {
  if (r.auth?.display_name) return r.auth.display_name;
  const a = r.auth?.accessor ?? '';
  if (!a) return '-';
  return a.startsWith('hmac-sha256:') ? `hmac:${a.slice(12, 20)}` : a.slice(0, 8);
}

// The tenant's own audit stream: the last 100 records, then whatever comes after (after=SEQ).
export function Audit({ tenant }: { tenant: string }) {
  const [records, setRecords] = useState<Record[]>([]);
  const [total, setTotal] = useState(0);
  const [complete, setComplete] = useState(true);
  const [error, setError] = useState('');
  const [status, setStatus] = useState(0);
  const [follow, setFollow] = useState(true);
  const last = useRef(-1);
  useEffect(() => {
    setRecords([]);
    last.current = -1;
    let stopped = false;
    let timer = 0;
    const tick = async () => {
      await whenVisible();
      if (stopped) return;
      try {
        const q = last.current < 0 ? 'audit?limit=100' : `audit?limit=500&after=${last.current}`;
        const d = await get<{ data: { records: Record[]; total: number; complete?: boolean } }>(tenantPath(tenant, q));
        if (stopped) return;
        const recs = d.data.records ?? [];
        if (recs.length) {
          last.current = recs[recs.length - 1].seq;
          setRecords((old) => [...recs.slice().reverse(), ...old].slice(0, 1000));
        } else if (last.current < 0) {
          last.current = 0;
        }
        setTotal(d.data.total ?? 0);
        setComplete(d.data.complete ?? true);
        setError('');
      } catch (e) {
        if (!stopped) {
          setError(errorText(e));
          setStatus((e as { status?: number }).status ?? 0);
        }
      }
      if (!stopped && follow) timer = window.setTimeout(tick, 2000);
    };
    void tick();
    return () => { stopped = true; window.clearTimeout(timer); };
  }, [tenant, follow]);
  return (
    <div>
      <PageHead title={`Audit log · ${tenant}`}>
        <span class="muted" title={complete ? '' : 'and more in older rotated files of the log'}>{complete ? `${total} records in all` : `${total}+ records`}</span>
        <label class="check"><input type="checkbox" checked={follow} onChange={(e) => setFollow((e.target as HTMLInputElement).checked)} /> follow</label>
      </PageHead>
      <p class="muted">This page's own reads are in the stream too: every request the console makes is an API request, audited like any other.</p>
      <ErrorBox error={error} status={status} />
      <table class="table compact" id="audit-table">
        <thead><tr><th>Seq</th><th>Time</th><th>Type</th><th>Actor</th><th>Request</th><th>Status</th><th>Error</th><th>Request id</th></tr></thead>
        <tbody>
          {records.map((r) => (
            <tr class={(r.response?.status ?? 0) >= 400 ? 'bad' : ''}>
              <td>{r.seq}</td><td class="mono nowrap">{r.time}</td><td>{r.type}</td><td class="mono">{actor(r)}</td>
              <td class="mono">{r.request?.method} {r.request?.path}</td>
              <td>{r.response?.status ?? ''}</td><td class="reason">{r.error}</td>
              <td class="mono muted">{r.request_id}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
