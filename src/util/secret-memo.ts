/**
 * Values derived from a secret, one per message (an HMAC of each), kept per isolate. All are
 * forgotten at once when the secret changes or when `maxEntries` are held: the messages can be many
 * (client networks), and a value derived from an old secret is never answered for a new one.
 */
export class SecretMemo<V> {
  readonly maxEntries: number;
  private readonly derive: (secret: string, message: string) => V;
  private readonly values = new Map<string, V>();
  private secret: string | null = null;

  constructor(maxEntries: number, derive: (secret: string, message: string) => V) {
    this.maxEntries = maxEntries;
    this.derive = derive;
  }

  get(secret: string, message: string): V {
    if (this.secret !== secret || this.values.size >= this.maxEntries) {
      this.values.clear();
      this.secret = secret;
    }
    let v = this.values.get(message);
    if (v === undefined) {
      v = this.derive(secret, message);
      this.values.set(message, v);
    }
    return v;
  }
}
