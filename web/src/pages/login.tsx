import { useState } from 'preact/hooks';
import { login, Session } from '../api';
import { errorText } from '../util';

export function Login({ reason, onLogin }: { reason: string; onLogin: (s: Session) => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      onLogin(await login(token.trim()));
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="login">
      <form class="card login-card" id="login-form" onSubmit={submit}>
        <div class="brand big"><img src="favicon.svg" alt="" width="32" height="32" /> Tessera</div>
        <p class="muted">Sign in with a token: an operator's, or a tenant's (<code>tessera token create</code>,
          or the one <code>tessera dev</code> printed).</p>
        {reason && <div class="notice" id="login-reason">{reason}</div>}
        <label for="token">Token</label>
        <input id="token" type="password" autocomplete="off" spellcheck={false} placeholder="tsr.…"
               value={token} onInput={(e) => setToken((e.target as HTMLInputElement).value)} required />
        {error && <div class="error" id="login-error">{error}</div>}
        <button class="btn primary" type="submit" disabled={busy || !token.trim()}>{busy ? 'Signing in…' : 'Sign in'}</button>
        <p class="fine">The token stays in this browser tab (sessionStorage) and goes only to this
          server, in the <code>X-Tessera-Token</code> header of its API requests.</p>
      </form>
    </div>
  );
}
