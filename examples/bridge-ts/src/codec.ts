// The team's payload codec, plugged into the bridge's client (docs/wire.md, "Payload encoding").
// This one is AES-256-GCM over each serialized payload, as Temporal's encryption samples and the
// wf-initiation tests' team codec do: the same key decodes what either side wrote. A team plugs in
// its own PayloadCodec instead.
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import type { Payload, PayloadCodec } from "@temporalio/common";
import { temporal } from "@temporalio/proto";

const ENCODING = "binary/encrypted";
const PayloadProto = temporal.api.common.v1.Payload;

export class AesGcmCodec implements PayloadCodec {
  constructor(private readonly key: Buffer) {
    if (key.length !== 32) throw new Error("the codec key must be 32 bytes (64 hex digits)");
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      const nonce = randomBytes(12);
      const cipher = createCipheriv("aes-256-gcm", this.key, nonce);
      const plain = PayloadProto.encode(payload).finish();
      const sealed = Buffer.concat([cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
      return { metadata: { encoding: Buffer.from(ENCODING) }, data: Buffer.concat([nonce, sealed]) };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      const encoding = payload.metadata?.encoding;
      if (!encoding || Buffer.from(encoding).toString() !== ENCODING || !payload.data) return payload;
      const data = Buffer.from(payload.data);
      const decipher = createDecipheriv("aes-256-gcm", this.key, data.subarray(0, 12));
      decipher.setAuthTag(data.subarray(data.length - 16));
      const plain = Buffer.concat([decipher.update(data.subarray(12, data.length - 16)), decipher.final()]);
      return PayloadProto.decode(plain) as Payload;
    });
  }
}
