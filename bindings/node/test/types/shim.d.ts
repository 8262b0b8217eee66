// The little of Node's types these checks need (no @types/node here).
declare global {
  class Buffer extends Uint8Array {
    equals(other: Uint8Array): boolean;
  }
}
export {};
