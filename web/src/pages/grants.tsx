import { get, tenantPath } from '../api';
import { duration, useTick, usePoll } from '../util';
import { ErrorBox, Loading, PageHead } from './common';

interface Grant { id: string; owner: string; grantee: string; on: string; policy: string; capabilities: string[];
                  created_time: string; expire_time: string; expired: boolean }

export function Grants({ tenant }: { tenant: string }) {
  const { data, error, status } = usePoll(() => get<{ data: { grants: Grant[] } }>(tenantPath(tenant, 'grants')).then((d) => d.data.grants ?? []), 10000, [tenant]);
  useTick(1000);
  return (
    <div>
      <PageHead title={`Grants · ${tenant}`} />
      <p class="muted">Time-bound access to this tenant's secrets given to another tenant, and access given to this one.</p>
      <ErrorBox error={error} status={status} />
      {!data && !error && <Loading />}
      {data && data.length === 0 && <div class="empty">No grants given or received.</div>}
      {data && data.length > 0 && (
        <table class="table" id="grants-table">
          <thead><tr><th>Direction</th><th>Owner → grantee</th><th>On</th><th>Policy</th><th>Capabilities</th><th>Time left</th><th>Expires</th></tr></thead>
          <tbody>
            {data.map((g) => {
              const left = (Date.parse(g.expire_time) - Date.now()) / 1000;
              return (
                <tr class={g.expired || left <= 0 ? 'expired' : ''}>
                  <td>{g.owner === tenant ? 'given' : 'received'}</td>
                  <td>{g.owner} → {g.grantee}</td>
                  <td class="mono">{g.on}</td>
                  <td>{g.policy}</td>
                  <td>{(g.capabilities ?? []).join(', ')}</td>
                  <td class={left < 600 ? 'warn' : ''}>{g.expired || left <= 0 ? 'expired' : duration(left)}</td>
                  <td class="mono">{g.expire_time}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </div>
  );
}
