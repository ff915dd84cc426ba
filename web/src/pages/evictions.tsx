import { get, tenantPath, encPath } from '../api';
import { usePoll } from '../util';
import { TimeChart } from '../chart';
import { href } from '../app';
import { ErrorBox, Loading, PageHead } from './common';

interface Eviction { tenant: string; workload: string; time: number; iso: string; reason: string }

const kMaxWorkloads = 300;

// Evictions over time, from every tenant's workload events (`"event": "evicted"`, with who took
// the GPUs and why), read through the API as an operator.
export function Evictions() {
  const { data, error, status } = usePoll(async () => {
    const tenants = (await get<{ data: { keys: string[] } }>('/v1/tenants?list=true')).data.keys ?? [];
    const out: Eviction[] = [];
    let scanned = 0;
    for (const t of tenants) {
      let names: string[] = [];
      try {
        names = (await get<{ data: { keys: string[] } }>(tenantPath(t, 'workloads?list=true'))).data.keys ?? [];
      } catch {
        continue;  // A tenant without workloads answers 404.
      }
      names = names.slice(0, Math.max(0, kMaxWorkloads - scanned));
      scanned += names.length;
      const events = await Promise.all(names.map((n) =>
        get<{ data: { events: { event: string; time: string; reason?: string }[] } }>(tenantPath(t, `workloads/${encPath(n)}/events`))
          .then((d) => ({ n, ev: d.data.events ?? [] }), () => ({ n, ev: [] }))));
      for (const { n, ev } of events) {
        for (const e of ev) {
          if (e.event === 'evicted') out.push({ tenant: t, workload: n, time: Date.parse(e.time) / 1000, iso: e.time, reason: e.reason ?? '' });
        }
      }
    }
    out.sort((a, b) => b.time - a.time);
    return { out, scanned };
  }, 15000);
  const buckets = bucket(data?.out ?? []);
  return (
    <div>
      <PageHead title="Evictions">
        {data && <span class="muted">{data.out.length} evictions in {data.scanned} workloads</span>}
      </PageHead>
      <ErrorBox error={error} status={status} />
      {!data && !error && <Loading />}
      {data && (
        <div class="card">
          <h2>Per minute, last hour</h2>
          <TimeChart x={buckets.x} ys={[buckets.reclaimed, buckets.preempted, buckets.other]} yLabel="evictions" height={200}
                     series={[{ label: 'reclaimed (fair share)', colour: '#ff5d73', bars: true, fill: 'rgba(255,93,115,0.5)' },
                              { label: 'preempted (priority)', colour: '#9f7aea', bars: true, fill: 'rgba(159,122,234,0.5)' },
                              { label: 'other', colour: '#8a94a6', bars: true, fill: 'rgba(138,148,166,0.5)' }]} />
        </div>
      )}
      {data && data.out.length === 0 && <div class="empty">No evictions: no workload's events record one.</div>}
      {data && data.out.length > 0 && (
        <div class="card">
          <table class="table" id="evictions-table">
            <thead><tr><th>Time</th><th>Tenant</th><th>Workload</th><th>Why</th></tr></thead>
            <tbody>
              {data.out.slice(0, 200).map((e) => (
                <tr><td class="mono nowrap">{e.iso}</td><td>{e.tenant}</td>
                  <td><a href={href(e.tenant, 'workloads', e.workload)}>{e.workload}</a></td><td class="reason">{e.reason}</td></tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function bucket(evs: Eviction[]) {
  const now = Math.floor(Date.now() / 60000) * 60;
  const x: number[] = [], reclaimed: number[] = [], preempted: number[] = [], other: number[] = [];
  for (let i = 59; i >= -1; i--) {  // One bucket past now: the last bar is drawn whole.
    x.push(now - i * 60);
    reclaimed.push(0); preempted.push(0); other.push(0);
  }
  for (const e of evs) {
    const i = Math.floor((e.time - (now - 59 * 60)) / 60);
    if (i < 0 || i >= 60) continue;
    if (e.reason.startsWith('reclaimed')) reclaimed[i]++;
    else if (e.reason.startsWith('preempted')) preempted[i]++;
    else other[i]++;
  }
  return { x, reclaimed, preempted, other };
}
