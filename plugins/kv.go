package plugins

// StorageNamespace is the prefix of the [storage.KV] namespaces the plugins'
// key-value store uses: tenant t's values live in namespace "plugins:"+t of
// Options.KV, apart from every other tenant's (all plugins of a tenant
// share them).
const StorageNamespace = "plugins:"

// kvNamespace is the storage namespace of a tenant's values.
func kvNamespace(tenant string) string { return StorageNamespace + tenant }
