import { useEffect, useState } from 'preact/hooks';
import { get, tenantPath } from '../api';
import { tenantColour, usePoll } from '../util';
import { ErrorBox, Loading, PageHead } from './common';

interface Use { tenant: string; workload: string; task: number; milli: number; terminating: boolean; mig_profile?: string; mig_slot?: number }
interface Device { index: number; model: string; mig: boolean; uses: Use[] }
interface Node {
  name: string; state: string; cordoned: boolean; devices: Device[]; gpus: Record<string, number>;
  labels: Record<string, string>; agent?: boolean; seconds_since_heartbeat?: number; dedicated_to?: string; tasks?: number;
}
interface Models { models: Record<string, { mig_profiles: Record<string, { memory_slices: number; compute_slices: number }> }>; mig_memory_slices: number }

let modelsOnce: Promise<Models> | null = null;
const gpuModels = () => (modelsOnce ??= fetch('gpu-models.json').then((r) => r.json() as Promise<Models>));

// The fleet as a GPU map: each node's GPUs, what runs on each (whole, a fractional share sized
// by its milli-GPU, MIG instances placed at their slot and sized by their profile's memory
// slices), coloured by tenant. `tenant` "": the operator's view of every node (GET /v1/nodes);
// else that tenant's view (its own tasks only).
export function Fleet({ tenant }: { tenant: string }) {
  const path = tenant ? tenantPath(tenant, 'nodes') : '/v1/nodes';
  const { data, error, status } = usePoll(() => get<{ data: { nodes: Node[] } }>(path).then((d) => d.data.nodes ?? []), 10000, [path]);
  const [models, setModels] = useState<Models | null>(null);
  useEffect(() => { gpuModels().then(setModels, () => {}); }, []);
  const tenants = new Set<string>();
  let total = 0, used = 0;
  for (const n of data ?? []) {
    for (const d of n.devices ?? []) {
      total += 1000;
      for (const u of d.uses) {
        tenants.add(u.tenant);
        used += u.milli;
      }
    }
  }
  const lost = (data ?? []).filter((n) => n.state === 'lost').length;
  const cordoned = (data ?? []).filter((n) => n.cordoned).length;
  return (
    <div>
      <PageHead title={tenant ? `GPU map · ${tenant}` : 'GPU map · fleet'}>
        {data && <span class="muted">{data.length} nodes · {total / 1000} GPUs · {(used / 1000).toFixed(2)} allocated{tenant ? ' to this tenant' : ''}
          {lost > 0 && <> · <b class="bad-text">{lost} lost</b></>}{cordoned > 0 && <> · {cordoned} cordoned</>}</span>}
      </PageHead>
      {tenant && <p class="muted">Your tasks only: what other tenants run is not shown to a tenant.</p>}
      <ErrorBox error={error} status={status} />
      {!data && !error && <Loading />}
      {data && (
        <div class="legend" id="legend">
          {[...tenants].sort().map((t) => <span class="legend-item"><i style={{ background: tenantColour(t) }} />{t}</span>)}
          <span class="legend-item"><i class="free" />free</span>
          <span class="legend-item"><i class="terminating-swatch" />stopping</span>
          <span class="legend-item"><i class="mig-swatch" />MIG slice free</span>
        </div>
      )}
      <div class="nodes" id="gpu-map">
        {(data ?? []).map((n) => <NodeCard node={n} models={models} />)}
      </div>
    </div>
  );
}

function NodeCard({ node, models }: { node: Node; models: Models | null }) {
  const cls = ['node', `state-${node.state}`, node.cordoned ? 'cordoned' : ''].join(' ');
  return (
    <div class={cls} data-node={node.name} data-state={node.state} data-cordoned={String(node.cordoned)}>
      <div class="node-head">
        <span class="node-name mono">{node.name}</span>
        <span class={`badge state ${node.state}`}>{node.state}</span>
        {node.cordoned && <span class="badge cordon">cordoned</span>}
        {node.dedicated_to && <span class="badge pool">pool of {node.dedicated_to}</span>}
        <span class="muted small">{Object.entries(node.gpus).map(([m, c]) => `${c}× ${m}`).join(', ')}
          {node.seconds_since_heartbeat !== undefined && node.seconds_since_heartbeat >= 0 && ` · heartbeat ${node.seconds_since_heartbeat}s ago`}</span>
      </div>
      <div class="gpus">
        {(node.devices ?? []).map((d) => <Gpu d={d} models={models} />)}
      </div>
    </div>
  );
}

function label(u: Use) {
  return `${u.tenant}/${u.workload} task ${u.task}` + (u.mig_profile ? ` · MIG ${u.mig_profile} at slice ${u.mig_slot}` :
    u.milli < 1000 ? ` · ${u.milli / 1000} GPU` : ' · whole GPU') + (u.terminating ? ' · stopping' : '');
}

function Gpu({ d, models }: { d: Device; models: Models | null }) {
  const slicesOf = (p: string) => models?.models[d.model]?.mig_profiles[p]?.memory_slices ?? 1;
  const totalSlices = models?.mig_memory_slices ?? 8;
  return (
    <div class={d.mig ? 'gpu mig' : 'gpu'} data-gpu={d.index} data-mig={String(d.mig)}>
      <div class="gpu-label"><span>GPU {d.index}</span>{d.mig && <span class="tag">MIG</span>}</div>
      <div class="gpu-body">
        {d.mig && Array.from({ length: totalSlices }, (_, i) => <div class="slice-grid" style={{ left: `${(100 * i) / totalSlices}%`, width: `${100 / totalSlices}%` }} />)}
        {d.mig
          ? d.uses.map((u) => {
              const w = slicesOf(u.mig_profile ?? '');
              return (
                <div class={`use mig-tile${u.terminating ? ' terminating' : ''}`} data-kind="mig" data-tenant={u.tenant} data-workload={u.workload}
                     data-profile={u.mig_profile} data-slices={w} title={label(u)}
                     style={{ left: `${(100 * (u.mig_slot ?? 0)) / totalSlices}%`, width: `${(100 * w) / totalSlices}%`, background: tenantColour(u.tenant) }}>
                  <span>{u.mig_profile}</span>
                </div>
              );
            })
          : stack(d.uses).map(({ u, left }) => (
              <div class={`use ${u.milli >= 1000 ? 'whole' : 'share'}${u.terminating ? ' terminating' : ''}`}
                   data-kind={u.milli >= 1000 ? 'whole' : 'share'} data-tenant={u.tenant} data-workload={u.workload} data-milli={u.milli}
                   title={label(u)}
                   style={{ left: `${left / 10}%`, width: `${Math.min(u.milli, 1000 - left) / 10}%`, background: tenantColour(u.tenant) }}>
                <span>{u.workload}</span>
              </div>
            ))}
      </div>
      <div class="gpu-model muted">{d.model}</div>
    </div>
  );
}

// Fractional shares side by side, each as wide as its milli-GPU.
function stack(uses: Use[]) {
  let left = 0;
  return uses.map((u) => {
    const at = left;
    left += u.milli;
    return { u, left: Math.min(at, 1000) };
  });
}
