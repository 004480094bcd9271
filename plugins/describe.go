package plugins

import (
	"context"
	"errors"

	"github.com/agentichost/agentic/host/schema"
)

// describe loads the module's description from describe or a sidecar, and
// builds its tools, validators and policies.
func (m *Module) describe(ctx context.Context, sidecar *Sidecar) error {
	var (
		d       Description
		schemas map[string]*schema.Schema
		err     error
	)
	switch {
	case sidecar != nil:
		d = sidecar.description()
		schemas, err = d.validate(true)
		if err != nil {
			return m.fail("sidecar", "", err)
		}
		for _, t := range d.Tools {
			if !m.exports[t.Export] {
				return m.fail("sidecar", t.Name, detailed(ErrInvalidDescription, "the module exports no %q", t.Export))
			}
		}
	case m.exports["describe"]:
		var perr error
		err = m.invoke(ctx, "describe", "", "", nil, 0, func(out []byte) error {
			d, schemas, perr = parseDescription(out)
			if errors.Is(perr, ErrMalformedOutput) {
				return perr
			}
			return nil
		})
		if err == nil {
			err = perr
		}
		if err != nil {
			var pe *PluginError
			if errors.As(err, &pe) {
				return err
			}
			return m.fail("describe", "", err)
		}
		need := map[string]bool{"call": len(d.Tools) > 0, "validate": len(d.Validators) > 0, "decide": len(d.Policies) > 0}
		for export, needed := range need {
			if needed && !m.exports[export] {
				return m.fail("describe", "", detailed(ErrInvalidDescription, "it describes items its module cannot serve: no %q export", export))
			}
		}
	default:
		return nil // bare: only CallExport
	}
	m.desc, m.described = d, true
	m.tools = map[string]*moduleTool{}
	m.validators = map[string]*moduleValidator{}
	m.policies = map[string]*modulePolicy{}
	for _, t := range d.Tools {
		mt := &moduleTool{mod: m, desc: t, spec: t.spec(), schema: schemas["tool:"+t.Name]}
		m.tools[t.Name] = mt
		m.toolList = append(m.toolList, mt)
	}
	for _, v := range d.Validators {
		m.validators[v.Name] = &moduleValidator{mod: m, desc: v, schema: schemas["validator:"+v.Name]}
	}
	for _, p := range d.Policies {
		m.policies[p.Name] = &modulePolicy{mod: m, desc: p}
	}
	return nil
}
