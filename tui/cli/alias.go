package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
)

func (a *app) aliasCmd() *cobra.Command {
	var namespace string
	c := &cobra.Command{
		Use:   "alias",
		Short: "Mesh-wide model names: a name stands for a source, placed on the first request that names it",
	}
	c.PersistentFlags().StringVar(&namespace, "namespace", "", "namespace of the alias (default: the token's, or \"default\")")
	set := &cobra.Command{
		Use:   "set NAME SOURCE",
		Short: "Make NAME stand for SOURCE everywhere in the mesh (mesh alias set qwen ollama://qwen2.5:0.5b)",
		Args:  a.args(cobra.ExactArgs(2)),
	}
	set.RunE = a.oneShot(false, needAgents, func(ctx context.Context, s *session, _ *cobra.Command, args []string) error {
		in, err := s.conn.SetAlias(ctx, args[0], api.AliasRequest{Source: args[1], Namespace: namespace})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(a.stdout, cellCleaner.Replace(api.IntentLine(api.IntentStatus{Intent: in})))
		return err
	})
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Forget an alias, and remove what it placed",
		Args:  a.args(cobra.ExactArgs(1)),
	}
	rm.RunE = a.oneShot(false, needAgents, func(ctx context.Context, s *session, _ *cobra.Command, args []string) error {
		ns := namespace
		if who, err := api.Claim(s.conn.Token()); ns == "" && err == nil {
			ns = who.Namespace // a namespace token's own; the admin's is ""
		}
		if ns == "" {
			ns = api.DefaultNamespace
		}
		if _, err := s.conn.Unintend(ctx, ns, args[0]); err != nil {
			return err
		}
		_, err := fmt.Fprintf(a.stdout, "forgot %s\n", api.IntentKey(ns, args[0]))
		return err
	})
	c.AddCommand(set, rm)
	return c
}
