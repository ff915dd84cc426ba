import { get } from '../api';
import { gpus, tenantColour, usePoll } from '../util';
import { href } from '../app';
import { QueueChart, QueueRow, QueueTable, useQueueSamples } from './queues';
import { ErrorBox, Loading, PageHead } from './common';

interface Tenant { name: string; quota_milli_gpu: number; limit_milli_gpu: number; weight: number; priority: number;
                   trust_group?: string; max_workloads: number; created_time?: string }

// Tenants with their settings, and the fair-share tree (GET /v1/queues: the root, each tenant's
// queue, its teams' queues) as a table and a chart per tenant over time.
export function Tenants() {
  const tenants = usePoll(async () => {
    const keys = (await get<{ data: { keys: string[] } }>('/v1/tenants?list=true')).data.keys ?? [];
    return Promise.all(keys.map((k) => get<{ data: Tenant }>(`/v1/tenants/${encodeURIComponent(k)}`).then((d) => ({ ...d.data, name: k }))));
  }, 10000);
  const q = useQueueSamples('/v1/queues', 'admin');
  const byName = new Map((q.rows ?? []).map((r) => [r.name, r] as [string, QueueRow]));
  return (
    <div>
      <PageHead title="Tenants & fair share" />
      <ErrorBox error={tenants.error || q.error} status={tenants.status || q.status} />
      {!tenants.data && !tenants.error && <Loading />}
      {tenants.data && (
        <div class="card">
          <table class="table" id="tenants-table">
            <thead><tr><th>Tenant</th><th>Quota</th><th>Limit</th><th>Weight</th><th>Priority</th><th>Trust group</th><th>Allocated</th><th>Fair share</th><th>Pending</th></tr></thead>
            <tbody>
              {tenants.data.map((t) => {
                const r = byName.get(t.name);
                return (
                  <tr data-tenant={t.name}>
                    <td><i class="dot" style={{ background: tenantColour(t.name) }} /><a href={href(t.name, 'workloads')}>{t.name}</a></td>
                    <td>{t.quota_milli_gpu ? gpus(t.quota_milli_gpu) : '—'}</td>
                    <td>{t.limit_milli_gpu >= 0 ? gpus(t.limit_milli_gpu) : 'none'}</td>
                    <td>{t.weight}</td><td>{t.priority}</td><td>{t.trust_group || '—'}</td>
                    <td>{r ? gpus(r.allocated_milli_gpu) : '—'}</td>
                    <td>{r ? gpus(r.fair_share_milli_gpu) : '—'}</td>
                    <td>{r ? gpus(r.pending_milli_gpu) : '—'}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {q.rows && (
        <div class="card">
          <h2>Fair-share tree</h2>
          <p class="muted">The root, each tenant's queue and its teams' queues. A bar past its fair-share mark is over its share (reclaimable); the grey mark is the quota.</p>
          <QueueTable rows={q.rows} />
        </div>
      )}
      {q.rows && q.hist && (
        <div class="charts">
          {q.rows.filter((r) => r.name.split('/').length <= 1).map((r) => <div class="card"><QueueChart name={r.name} hist={q.hist!} /></div>)}
        </div>
      )}
    </div>
  );
}
